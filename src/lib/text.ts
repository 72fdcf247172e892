/**
 * PostgreSQL text cannot hold U+0000, so no stored value contains it: a lookup by such a string
 * names nothing and must not be sent to the database (it would fail there).
 */
export const isStorableText = (text: string): boolean => !text.includes('\0');

/**
 * Whether `text` survives a trip through a JSON argument into PostgreSQL text: no NUL, and no lone
 * UTF-16 surrogate (JSON.stringify escapes one as \udXXX, which PostgreSQL refuses to decode).
 */
export const isStorableInJson = (text: string): boolean => isStorableText(text) && !/\p{Surrogate}/u.test(text);
