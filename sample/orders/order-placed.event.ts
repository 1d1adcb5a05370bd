/** Topic of the event published when an order is placed. */
export const ORDER_PLACED = 'order.placed';

/** Payload of `order.placed`. */
export interface OrderPlacedEvent {
  orderId: string;
  customer: string;
  /** In cents. */
  amount: number;
}
