import { auditStatements } from '../shared/audit-sql';
import { mysqlFlavor } from './mysql-flavor';
import { qt } from './mysql-sql';

export const mysqlAudit = auditStatements(mysqlFlavor, (table) => [
  `CREATE TABLE ${qt(table)} (
      \`id\` char(36) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
      \`started_at\` datetime(6) NOT NULL,
      \`finished_at\` datetime(6) NULL,
      \`actor\` varchar(255) NULL,
      \`action\` varchar(32) NOT NULL,
      \`selection\` text NOT NULL,
      \`options\` text NOT NULL,
      \`matched\` int NULL,
      \`changed\` int NULL,
      \`skipped\` int NULL,
      \`outcome\` varchar(16) NOT NULL,
      \`error\` text NULL
    ) ENGINE=InnoDB`,
]);
