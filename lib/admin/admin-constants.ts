/** The resolved options of `OutboxAdminModule` (what the page does). */
export const OUTBOX_ADMIN_OPTIONS = Symbol('outbox:admin-options');
/** The API's version, in its path: `<path>/api/v1`. */
export const ADMIN_API = 'api/v1';
