import { OutboxConfigurationError, OutboxModule, type OutboxModuleOptions } from '../../lib';

describe('OutboxModule.forRoot', () => {
  it('refuses bad options in the call itself, before any provider or connection exists', () => {
    const call = () => OutboxModule.forRoot({ worker: { pollIntervalMs: '100' as unknown as number } });
    expect(call).toThrow(OutboxConfigurationError);
    expect(call).toThrow(/worker\.pollIntervalMs/);
  });

  it('refuses an unknown key, naming it', () => {
    expect(() => OutboxModule.forRoot({ pollInterval: 10 } as unknown as OutboxModuleOptions)).toThrow(/pollInterval/);
  });

  it('refuses a bad table name and a handler timeout past the lease', () => {
    expect(() => OutboxModule.forRoot({ tableName: '1events' })).toThrow(OutboxConfigurationError);
    expect(() =>
      OutboxModule.forRoot({ worker: { renewLease: false, leaseMs: 5000, handlerTimeoutMs: 5000 } }),
    ).toThrow(/handlerTimeoutMs/);
  });

  it('takes valid options and the module extras, and gives the module', () => {
    const module = OutboxModule.forRoot({ isGlobal: false, tableName: 'audit_outbox', worker: { enabled: false } });
    expect(module.module).toBe(OutboxModule);
    expect(module.global).toBe(false);
    expect(OutboxModule.forRoot().module).toBe(OutboxModule);
  });
});
