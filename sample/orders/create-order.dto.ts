import { BadRequestException } from '@nestjs/common';

/** Upper bound of `amount`, in cents; keeps it well inside a 32-bit integer column. */
const MAX_AMOUNT = 100_000_000;
const MAX_CUSTOMER_LENGTH = 200;

export interface CreateOrderDto {
  customer: string;
  /** In cents. */
  amount: number;
}

/** Checks the body of `POST /orders` by hand; throws a 400 that lists every problem. */
export function parseCreateOrder(body: unknown): CreateOrderDto {
  const { customer, amount } = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const name = typeof customer === 'string' ? customer.trim() : '';
  const problems: string[] = [];
  if (name.length === 0 || name.length > MAX_CUSTOMER_LENGTH) {
    problems.push(`customer must be a non-empty string of at most ${MAX_CUSTOMER_LENGTH} characters`);
  }
  if (typeof amount !== 'number' || !Number.isInteger(amount) || amount < 1 || amount > MAX_AMOUNT) {
    problems.push(`amount must be a whole number of cents from 1 to ${MAX_AMOUNT}`);
  }
  if (problems.length > 0) throw new BadRequestException(problems);
  return { customer: name, amount: amount as number };
}
