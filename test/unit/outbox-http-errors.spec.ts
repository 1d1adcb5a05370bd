import {
  OutboxDedupeConflictError,
  OutboxEventNotFoundError,
  OutboxHttpError,
  OutboxPayloadTooLargeError,
  OutboxStateConflictError,
  OutboxValidationError,
} from '../../lib';

/**
 * NestJS 12's exception filter answers an error that is not an HttpException with its own status only when
 * it has the shape of the `http-errors` package: a numeric `statusCode`, `status` equal to it and a boolean
 * `expose`; anything else is a 500. NestJS 11, which the suite runs on, reads `statusCode` alone, so the
 * shape is held here (compat/nestjs12's http-errors test checks the answers on 12).
 */
describe('the HTTP-meaningful errors', () => {
  it.each([
    ['OutboxValidationError', 400, new OutboxValidationError('filter', 'bad')],
    ['OutboxPayloadTooLargeError', 400, new OutboxPayloadTooLargeError(2, 1)],
    ['OutboxEventNotFoundError', 404, new OutboxEventNotFoundError('e-1')],
    ['OutboxStateConflictError', 409, new OutboxStateConflictError('e-1', 'due')],
    ['OutboxDedupeConflictError', 409, new OutboxDedupeConflictError('k', 'e-1')],
  ])('%s has the http-errors shape with %i, its message exposed', (_name, statusCode, error) => {
    expect(error).toBeInstanceOf(OutboxHttpError);
    expect(error).toBeInstanceOf(Error);
    expect({ statusCode: error.statusCode, status: error.status, expose: error.expose }).toEqual({
      statusCode,
      status: statusCode,
      expose: true,
    });
  });
});
