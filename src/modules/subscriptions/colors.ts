/** Zulip's palette for new subscriptions (STREAM_ASSIGNMENT_COLORS), in its order. */
const STREAM_COLORS = [
  '#76ce90',
  '#fae589',
  '#a6c7e5',
  '#e79ab5',
  '#bfd56f',
  '#f4ae55',
  '#b0a5fd',
  '#addfe5',
  '#f5ce6e',
  '#c2726a',
  '#94c849',
  '#bd86e5',
  '#ee7e4a',
  '#a6dcbf',
  '#95a5fd',
  '#53a063',
  '#9987e1',
  '#e4523d',
  '#c2c2c2',
  '#4f8de4',
  '#c6a8ad',
  '#e7cc4d',
  '#c8bebf',
  '#a47462',
];

/**
 * The colours of one user's new subscriptions, as Zulip's pick_colors chooses them: the first
 * palette colour none of the user's subscriptions has, else the palette entry at (colours used)
 * modulo its length; each colour picked counts as used for the next.
 */
export function colorPicker(usedColors: readonly string[]): () => string {
  const used = new Set(usedColors);
  return () => {
    const color = STREAM_COLORS.find((candidate) => !used.has(candidate)) ?? STREAM_COLORS[used.size % STREAM_COLORS.length]!;
    used.add(color);
    return color;
  };
}
