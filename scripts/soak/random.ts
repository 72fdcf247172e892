// --- Random choices (Math.random: the run is a soak, not a reproducible test). ---

export const randomInt = (n: number) => Math.floor(Math.random() * n);
export const pickOne = <T>(items: readonly T[]): T => items[randomInt(items.length)]!;
export const coin = (p = 0.5) => Math.random() < p;
export const randomColor = () => `#${Array.from({ length: pickOne([3, 6]) }, () => pickOne([...'0123456789abcdefABCDEF'])).join('')}`;
