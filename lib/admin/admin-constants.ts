/** The resolved options of `OutboxAdminModule` (what the page does). */
export const OUTBOX_ADMIN_OPTIONS = Symbol('outbox:admin-options');
/** The guard made of the `canActivate` function, when one is given. */
export const OUTBOX_ADMIN_CAN_ACTIVATE = Symbol('outbox:admin-can-activate');
/** The API's version, in its path: `<path>/api/v1`. */
export const ADMIN_API = 'api/v1';
