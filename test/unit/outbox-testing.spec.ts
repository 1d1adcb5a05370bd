import { OutboxTesting, OutboxValidationError } from '../../lib';

describe('OutboxTesting.message', () => {
  it('builds what a handler receives on a first attempt', () => {
    const before = Date.now();
    const message = OutboxTesting.message('order.placed', { orderId: 'o-1' });
    expect(message).toEqual({
      id: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/) as string,
      topic: 'order.placed',
      key: null,
      payload: { orderId: 'o-1' },
      headers: {},
      attempt: 1,
      createdAt: expect.any(Date) as Date,
      signal: expect.any(AbortSignal) as AbortSignal,
    });
    expect(message.createdAt.getTime()).toBeGreaterThanOrEqual(before);
    expect(message.signal.aborted).toBe(false);
    expect(OutboxTesting.message('x', 1).id).not.toBe(message.id);
  });

  it('takes the fields a test sets, and copies the headers', () => {
    const controller = new AbortController();
    const headers = { tenant: 't-1' };
    const createdAt = new Date('2026-01-01T00:00:00Z');
    const message = OutboxTesting.message('order.placed', 'p', {
      id: 'fixed',
      key: 'k',
      headers,
      attempt: 3,
      createdAt,
      signal: controller.signal,
    });
    expect(message).toMatchObject({ id: 'fixed', key: 'k', headers: { tenant: 't-1' }, attempt: 3, createdAt });
    headers.tenant = 'changed';
    expect(message.headers.tenant).toBe('t-1');
    controller.abort();
    expect(message.signal.aborted).toBe(true);
  });

  it.each([
    ['a topic publish() would refuse', () => OutboxTesting.message('has space', {}), /topic/],
    [
      'attempt 0',
      () => OutboxTesting.message('t', {}, { attempt: 0 }),
      /attempt: expected a whole number of 1 or more, got 0/,
    ],
    ['a fractional attempt', () => OutboxTesting.message('t', {}, { attempt: 1.5 }), /got 1.5/],
  ])('refuses %s with an OutboxValidationError', (_what, build, message) => {
    expect(build).toThrow(OutboxValidationError);
    expect(build).toThrow(message);
  });
});
