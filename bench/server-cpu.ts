import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import type { Db } from './env';

/** The server's processes by their name in /proc: PostgreSQL's postmaster and backends, MariaDB's one process. */
const PROCESS_NAMES: Partial<Record<Db, string>> = { postgres: '(postgres)', mariadb: '(mariadbd)' };

let ticksPerSecond: number | undefined;

/**
 * CPU time, in µs, used so far by the processes of `db`'s server on this machine and by those that
 * ended (user and system, from /proc): the difference of two readings is what the server spent in
 * between. Undefined where no such process runs here (SQLite, a server elsewhere, no /proc).
 */
export function serverCpuUs(db: Db): number | undefined {
  const name = PROCESS_NAMES[db];
  if (!name) return undefined;
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((entry) => /^[0-9]+$/.test(entry));
  } catch {
    return undefined;
  }
  ticksPerSecond ??= Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  let ticks = 0;
  let found = false;
  for (const pid of pids) {
    let stat: string;
    try {
      stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    } catch {
      continue; // ended meanwhile
    }
    const end = stat.lastIndexOf(')');
    if (stat.slice(stat.indexOf('('), end + 1) !== name) continue;
    // After the name: state, then 10 fields, then utime, stime, cutime and cstime (fields 14 to 17 of
    // proc(5)): the children's times count a backend that ended meanwhile, reaped by the postmaster.
    const fields = stat.slice(end + 2).split(' ');
    ticks += Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
    found = true;
  }
  return found ? (ticks * 1_000_000) / ticksPerSecond : undefined;
}
