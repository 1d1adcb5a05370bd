import { type FSWatcher, watch } from 'node:fs';
import { basename, dirname, resolve } from 'node:path';
import type { WakeUpChannel } from '../shared/outbox-dialect.interface';
import { WakeUpChannelBase } from '../../wake-up/wake-up-channel-base';

/** Wake-ups closer together than this are one: a burst of commits is one look for work. */
const WAKE_WINDOW_MS = 2;

/**
 * Cross-process wake-up for processes sharing one SQLite file: every commit writes the database's WAL
 * (or, in rollback-journal mode, the file itself), and the operating system tells watchers of the
 * folder (inotify, FSEvents, ReadDirectoryChangesW) at no cost to the writer. So `notify` does
 * nothing; a listener looks for work whenever either file changes.
 *
 * Any write wakes it, the application's own and this worker's too: each costs at most one claim that
 * finds nothing (an index lookup that writes nothing, so it wakes no one). A hint like any other:
 * polling stays, and a platform that drops file events costs one poll interval.
 */
export class SqliteFileWakeUp extends WakeUpChannelBase implements WakeUpChannel {
  private watcher: FSWatcher | undefined;
  private timer: NodeJS.Timeout | undefined;
  private readonly folder: string;
  private readonly names: Set<string>;

  constructor(file: string) {
    super();
    const path = resolve(file);
    this.folder = dirname(path);
    const name = basename(path);
    this.names = new Set([name, `${name}-wal`]);
  }

  notify(): void {
    // The commit itself is the notification.
  }

  listen(wake: () => void): Promise<void> {
    if (this.closed) return Promise.resolve();
    try {
      // The folder, not the files: the WAL comes and goes with the connections that use it.
      this.watcher = watch(this.folder, { persistent: false }, (_event, name) => {
        if (name !== null && !this.names.has(String(name))) return;
        this.timer ??= setTimeout(() => {
          this.timer = undefined;
          wake();
        }, WAKE_WINDOW_MS);
      });
      this.watcher.on('error', (error) => this.failed(error, 'listen'));
    } catch (error) {
      // No file events here (an exhausted inotify limit, say): polling alone.
      this.failed(error, 'listen');
      return Promise.resolve();
    }
    this.listening(wake);
    return Promise.resolve();
  }

  close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    this.watcher?.close();
    this.watcher = undefined;
    return Promise.resolve();
  }
}

/** The file of an SQLite DataSource, or undefined for an in-memory database (nothing to watch). */
export function sqliteFile(database: unknown): string | undefined {
  if (
    typeof database !== 'string' ||
    database === '' ||
    database === ':memory:' ||
    database.startsWith('file::memory:')
  ) {
    return undefined;
  }
  return database;
}
