import { send, writeApplied } from './outcomes.js';
import { coin, pickOne, randomColor, randomInt } from './random.js';
import { BOOLEAN_PROPERTIES, type SettingColumn } from '../../src/modules/subscriptions/settings.js';
import type { ApiEvent, AuditRow, SimUser } from './seed.js';

// --- Settings: the change model of docs/api.md §2.8 and docs/api.md §3.2. ---

export interface Entry {
  stream_id: number;
  property: string;
  value: string | boolean;
}

export function randomEntry(user: SimUser): Entry {
  const streamId = pickOne([...user.streams.keys()]);
  return coin(0.25)
    ? { stream_id: streamId, property: 'color', value: randomColor() }
    : { stream_id: streamId, property: pickOne(BOOLEAN_PROPERTIES), value: coin() };
}

/** How many events an accepted entry appends (docs/api.md §3.2 event table). */
export const eventsOf = (entry: Entry): number => (entry.property === 'is_muted' || entry.property === 'in_home_view' ? 2 : 1);

/** Applies an accepted entry to the model: settings, audit row, events (docs/api.md §3.2 event table). */
export function applyEntry(user: SimUser, entry: Entry): void {
  const settings = user.settings.get(entry.stream_id)!;
  const column = (entry.property === 'in_home_view' ? 'is_muted' : entry.property) as SettingColumn;
  const stored = entry.property === 'in_home_view' ? !entry.value : entry.value;
  user.audit.push({ stream_id: entry.stream_id, property: column, old_value: settings[column], new_value: stored });
  settings[column] = stored;
  const event = (property: string, value: string | boolean): ApiEvent => ({
    type: 'subscription',
    op: 'update',
    property,
    value,
    stream_id: entry.stream_id,
  });
  if (entry.property === 'is_muted') user.events.push(event('in_home_view', !entry.value), event('is_muted', entry.value));
  else if (entry.property === 'in_home_view') user.events.push(event('in_home_view', entry.value), event('is_muted', !entry.value));
  else user.events.push(event(entry.property, entry.value));
}

/** An entry that must be refused, with the reason for the report. */
export function refusedEntry(user: SimUser): Entry {
  switch (randomInt(4)) {
    case 0:
      return { stream_id: pickOne(user.refusedStreams), property: 'pin_to_top', value: true };
    case 1:
      return { stream_id: pickOne([...user.streams.keys()]), property: 'color', value: pickOne(['red', '#12345g', '#1234567', '#fff\n']) };
    case 2:
      return { stream_id: pickOne([...user.streams.keys()]), property: 'is_muted', value: pickOne(['true', 'yes']) };
    default:
      return { stream_id: pickOne([...user.streams.keys()]), property: pickOne(['muted', "' OR 1=1 --", 'color%']), value: true };
  }
}

export async function bulkUpdate(port: number, user: SimUser): Promise<void> {
  const entries = Array.from({ length: 1 + randomInt(4) }, () => randomEntry(user));
  const refused = coin(0.2);
  if (refused) entries.splice(randomInt(entries.length + 1), 0, refusedEntry(user));
  const answer = await send(port, user, 'bulk update', {
    method: 'POST',
    path: '/api/v1/users/me/subscriptions/properties',
    form: { subscription_data: JSON.stringify(entries) },
  });
  const newEvents = entries.reduce((sum, entry) => sum + eventsOf(entry), 0);
  if (await writeApplied(user, 'bulk update', answer, refused ? 400 : 200, JSON.stringify(entries), newEvents)) {
    const start = user.audit.length;
    for (const entry of entries) applyEntry(user, entry);
    foldRequestAudit(user.audit, start);
  }
}

/** One audit row per (channel, setting) of a request: where it is first set, from its old value to its last one. */
function foldRequestAudit(audit: AuditRow[], start: number): void {
  const first = new Map<string, AuditRow>();
  for (const row of audit.splice(start)) {
    const key = `${row.stream_id}:${row.property}`;
    const earlier = first.get(key);
    if (earlier) {
      earlier.new_value = row.new_value;
    } else {
      first.set(key, row);
      audit.push(row);
    }
  }
}

export async function singleUpdate(port: number, user: SimUser): Promise<void> {
  const refused = coin(0.15);
  const entry = refused ? refusedEntry(user) : randomEntry(user);
  const answer = await send(port, user, 'single update', {
    method: pickOne(['PATCH', 'POST']),
    path: `/api/v1/users/me/subscriptions/${entry.stream_id}`,
    form: { property: entry.property, value: typeof entry.value === 'string' ? entry.value : String(entry.value) },
  });
  // A string value "true"/"yes" for is_muted is sent as the raw text: "true" is then the boolean true.
  const accepted = !refused || (entry.property === 'is_muted' && entry.value === 'true');
  if (refused && accepted) entry.value = true;
  if (await writeApplied(user, 'single update', answer, accepted ? 200 : 400, JSON.stringify(entry), eventsOf(entry)))
    applyEntry(user, entry);
}
