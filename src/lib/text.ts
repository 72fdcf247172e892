/**
 * PostgreSQL text cannot hold U+0000, so no stored value contains it: a lookup by such a string
 * names nothing and must not be sent to the database (it would fail there).
 */
export const isStorableText = (text: string): boolean => !text.includes('\0');
