import type { Config } from '../config.js';

export type HostConfig = Pick<Config, 'externalHost' | 'rootSubdomainAliases' | 'fakeEmailDomain' | 'externalUriScheme'>;

/** The organization subdomain a request's host names (docs/api.md §1.4); "" is the root organization. */
export function subdomainOfHost(host: string | undefined, config: HostConfig): string {
  if (!host) return '';
  const lowered = host.toLowerCase();
  const suffix = `.${config.externalHost}`;
  let subdomain = '';
  if (lowered.endsWith(suffix)) {
    subdomain = lowered.slice(0, -suffix.length);
  } else {
    const withPort = /^(.*):\d+$/.exec(lowered);
    if (withPort?.[1]?.endsWith(suffix)) subdomain = withPort[1].slice(0, -suffix.length);
  }
  return config.rootSubdomainAliases.includes(subdomain) ? '' : subdomain;
}

function organizationHost(subdomain: string, config: HostConfig): string {
  return subdomain === '' ? config.externalHost : `${subdomain}.${config.externalHost}`;
}

export function realmUrl(subdomain: string, config: HostConfig): string {
  return `${config.externalUriScheme}${organizationHost(subdomain, config)}`;
}

const LABEL = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;

/** Whether a host can serve as an email domain: no port; `localhost` or a dotted DNS name. */
function isUsableEmailDomain(host: string): boolean {
  if (host === 'localhost') return true;
  const labels = host.split('.');
  const last = labels.at(-1) ?? '';
  return labels.length >= 2 && labels.every((label) => LABEL.test(label)) && last.length >= 2 && !/^\d+$/.test(last);
}

/** Domain of dummy addresses (`user<id>@...`) and bot addresses for an organization (docs/api.md §2.3). */
export function fakeEmailDomain(subdomain: string, config: HostConfig): string {
  const host = organizationHost(subdomain, config);
  let usable = usableEmailDomains.get(host);
  if (usable === undefined) usableEmailDomains.set(host, (usable = isUsableEmailDomain(host)));
  return usable ? host : config.fakeEmailDomain;
}

// Needed for every user object; keyed by organization host, so it holds one entry per organization.
const usableEmailDomains = new Map<string, boolean>();
