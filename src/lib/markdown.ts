import MarkdownIt from 'markdown-it';
import { FilterXSS } from 'xss';

// CommonMark with single newlines as <br> and bare http(s) URLs linked; raw HTML is escaped.
const markdown = new MarkdownIt('commonmark', { html: false, xhtmlOut: false, linkify: true, breaks: true }).enable('linkify');
markdown.linkify.set({ fuzzyLink: false, fuzzyEmail: false, fuzzyIP: false });
markdown.validateLink = (url: string) => /^(https?:|mailto:)/i.test(url.trim());

// Defence in depth: whatever the renderer emits passes an allowlist of tags and attributes.
const sanitizer = new FilterXSS({
  whiteList: {
    p: [],
    br: [],
    strong: [],
    em: [],
    code: [],
    pre: [],
    blockquote: [],
    hr: [],
    ul: [],
    ol: ['start'],
    li: [],
    h1: [],
    h2: [],
    h3: [],
    h4: [],
    h5: [],
    h6: [],
    a: ['href', 'title'],
    img: ['src', 'alt', 'title'],
  },
  stripIgnoreTag: false,
  safeAttrValue: (_tag, name, value) => ((name === 'href' || name === 'src') && !/^(https?:|mailto:)/i.test(value.trim()) ? '' : value),
});

/** Renders user-supplied Markdown into safe HTML (docs/api.md §2.6). */
export function renderMarkdown(source: string): string {
  if (source === '') return '';
  return sanitizer.process(markdown.render(source)).replace(/\n$/, '');
}
