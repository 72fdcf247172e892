import type { Caller } from '../../http/auth.js';
import { EMAIL_ADDRESS_VISIBILITY as VISIBILITY, ROLES } from '../../zulip.js';

/** Who may see what of another user: address visibility (docs/api.md §2.3) and guest access (§2.4). */

/** The caller's facts these rules depend on (a Caller satisfies it). */
export type UserViewer = Pick<Caller, 'id' | 'role' | 'realmSubdomain' | 'realmCanAccessAllUsersGroup'>;

/** The target's facts these rules depend on. */
export interface VisibilityTarget {
  id: number;
  isActive: boolean;
  botType: number | null;
  emailAddressVisibility: number;
}

const VISIBLE_TO_ROLE: Readonly<Record<number, readonly number[]>> = {
  [ROLES.owner]: [VISIBILITY.everyone, VISIBILITY.members, VISIBILITY.admins, VISIBILITY.moderators],
  [ROLES.admin]: [VISIBILITY.everyone, VISIBILITY.members, VISIBILITY.admins, VISIBILITY.moderators],
  [ROLES.moderator]: [VISIBILITY.everyone, VISIBILITY.members, VISIBILITY.moderators],
  [ROLES.member]: [VISIBILITY.everyone, VISIBILITY.members],
  [ROLES.guest]: [VISIBILITY.everyone],
};

/** Bots' addresses are public whatever the stored setting says (docs/api.md §2.2: bots are always 1). */
export function effectiveVisibility(target: Pick<VisibilityTarget, 'botType' | 'emailAddressVisibility'>): number {
  return target.botType !== null ? VISIBILITY.everyone : target.emailAddressVisibility;
}

/** The address visibilities (as effectiveVisibility gives them) whose addresses the viewer may see. */
export function allowedVisibilities(viewer: Pick<UserViewer, 'role'>): readonly number[] {
  return VISIBLE_TO_ROLE[viewer.role] ?? [VISIBILITY.everyone];
}

/** Whether the viewer may see the target's real address (docs/api.md §2.3). */
export function canSeeDeliveryEmail(viewer: UserViewer, target: Omit<VisibilityTarget, 'isActive'>): boolean {
  if (viewer.id === target.id) return true;
  return allowedVisibilities(viewer).includes(effectiveVisibility(target));
}

/** A guest in an organization that limits guests' view of other users (docs/api.md §2.4). */
export function isRestrictedViewer(viewer: UserViewer): boolean {
  return viewer.role === ROLES.guest && viewer.realmCanAccessAllUsersGroup === 'members';
}

/** docs/api.md §2.4. `sharesActiveChannelWithViewer` is loaded for restricted viewers only (undefined: none shared). */
export function canAccessUser(viewer: UserViewer, target: VisibilityTarget & { sharesActiveChannelWithViewer?: boolean }): boolean {
  if (target.botType !== null) return true;
  if (!isRestrictedViewer(viewer)) return true;
  if (target.id === viewer.id) return true;
  return target.isActive && target.sharesActiveChannelWithViewer === true;
}

/** The highest (least privileged) role that may see an address of this visibility: the matrix is a threshold on the role. */
export function maxRoleSeeingAddress(visibility: number): number {
  const roles = Object.entries(VISIBLE_TO_ROLE)
    .filter(([, allowed]) => allowed.includes(visibility))
    .map(([role]) => Number(role));
  return roles.length === 0 ? 0 : Math.max(...roles);
}
