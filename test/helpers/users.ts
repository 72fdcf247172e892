/** A fixture human's user object (docs/api.md §2.11), as the user endpoints and events send it. */
export const humanObject = (id: number, fullName: string, email: string, role: number, extra: object = {}) => ({
  email,
  user_id: id,
  avatar_version: 1,
  is_admin: role <= 200,
  is_owner: role === 100,
  is_guest: role === 600,
  role,
  is_bot: false,
  full_name: fullName,
  timezone: '',
  is_active: true,
  date_joined: '2024-01-02T03:04+00:00',
  delivery_email: email,
  avatar_url: null as string | null,
  is_imported_stub: false,
  ...extra,
});

/** The inaccessible-user placeholder (docs/api.md §2.11): in events with is_active, in register's realm_users without. */
export function placeholderObject(id: number, withIsActive: boolean) {
  const object = humanObject(id, 'Unknown user', `user${id}@chat.example.com`, 400, {
    date_joined: '1970-01-01T00:00:00+00:00',
    delivery_email: null,
    avatar_url: '/static/images/unknown-user-avatar.png',
    profile_data: {},
  });
  if (withIsActive) return object;
  const { is_active, ...withoutIsActive } = object;
  return withoutIsActive;
}
