import { send, writeApplied } from './outcomes.js';
import { coin, pickOne, randomInt } from './random.js';
import { BUILT_INS, type SimUser, type View } from './seed.js';

// --- Navigation views: the rules of docs/api.md §3.9–§3.11. ---

export async function addView(port: number, user: SimUser): Promise<void> {
  let fragment: string;
  let name: string | undefined;
  switch (randomInt(5)) {
    case 0:
      fragment = pickOne(BUILT_INS);
      break;
    case 1:
      fragment = pickOne(BUILT_INS);
      name = 'Named built-in';
      break;
    case 2:
      fragment = user.views.length > 0 ? pickOne(user.views).fragment : 'narrow/none';
      name = `Copy ${user.nextViewNumber++}`;
      break;
    case 3:
      fragment = `narrow/soak/${user.label}/${user.nextViewNumber++}`;
      name = user.views.find((view) => view.name)?.name ?? `Same ${user.nextViewNumber}`;
      break;
    default:
      fragment = `narrow/soak/${user.label}/${user.nextViewNumber}`;
      name = `View ${user.nextViewNumber++} '%_`;
      break;
  }
  const isPinned = coin();
  const builtIn = BUILT_INS.includes(fragment);
  const clash = user.views.some((view) => view.fragment === fragment || (name !== undefined && view.name === name));
  const accepted = !(builtIn && name !== undefined) && !(!builtIn && name === undefined) && !clash;
  const answer = await send(port, user, 'add view', {
    method: 'POST',
    path: '/api/v1/navigation_views',
    // Surrounding spaces are trimmed by the server.
    form: { fragment: ` ${fragment} `, is_pinned: String(isPinned), ...(name !== undefined && { name: `${name}  ` }) },
  });
  if (await writeApplied(user, 'add view', answer, accepted ? 200 : 400, `${fragment} / ${name}`, 1)) {
    const view = { fragment, is_pinned: isPinned, name: name ?? null };
    user.views.push(view);
    user.events.push({ type: 'navigation_view', op: 'add', navigation_view: { ...view } });
  }
}

export async function updateView(port: number, user: SimUser): Promise<void> {
  const target = user.views.length > 0 && coin(0.85) ? pickOne(user.views).fragment : `narrow/missing/${randomInt(1000)}`;
  const isPinned = coin(0.7) ? coin() : undefined;
  let name: string | undefined;
  if (coin(0.4)) name = coin(0.7) ? `Renamed ${user.nextViewNumber++}` : (user.views.find((view) => view.name)?.name ?? 'Unused');
  const existing = user.views.find((view) => view.fragment === target);
  const expected =
    BUILT_INS.includes(target) && name !== undefined
      ? 400
      : name !== undefined && user.views.some((view) => view.name === name)
        ? 400
        : existing === undefined
          ? 404
          : 200;
  const answer = await send(port, user, 'update view', {
    method: 'PATCH',
    path: `/api/v1/navigation_views/${coin() ? encodeURIComponent(target) : target}`,
    form: { ...(isPinned !== undefined && { is_pinned: String(isPinned) }), ...(name !== undefined && { name }) },
  });
  if (await writeApplied(user, 'update view', answer, expected, `${target} / ${name} / ${isPinned}`, 1)) {
    const data: Partial<View> = { ...(name !== undefined && { name }), ...(isPinned !== undefined && { is_pinned: isPinned }) };
    Object.assign(existing!, data);
    user.events.push({ type: 'navigation_view', op: 'update', fragment: target, data });
  }
}

export async function removeView(port: number, user: SimUser): Promise<void> {
  const target = user.views.length > 0 && coin(0.85) ? pickOne(user.views).fragment : `narrow/missing/${randomInt(1000)}`;
  const index = user.views.findIndex((view) => view.fragment === target);
  const answer = await send(port, user, 'remove view', {
    method: 'DELETE',
    path: `/api/v1/navigation_views/${encodeURIComponent(target)}`,
  });
  if (await writeApplied(user, 'remove view', answer, index >= 0 ? 200 : 404, target, 1)) {
    user.views.splice(index, 1);
    user.events.push({ type: 'navigation_view', op: 'remove', fragment: target });
  }
}
