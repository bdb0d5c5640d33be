// pmjail's Deno cache compactor, run by the supervisor on a freshly warmed
// DENO_DIR (never in a guest): it folds each SQLite cache's write-ahead log
// into the database and switches it to rollback journaling, so that a
// guest's Deno can read it through a read-only lower layer (a WAL database
// needs a writable -shm file, and copying one up would cost every run).
//   deno run --allow-read=DIR --allow-write=DIR denocache.mjs DIR
import { DatabaseSync } from "node:sqlite";
const dir = Deno.args[0];
for (const e of Deno.readDirSync(dir)) {
  if (!e.isFile || /-(wal|shm|journal)$/.test(e.name)) continue;
  const db = new DatabaseSync(`${dir}/${e.name}`);
  db.exec("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;");
  db.close();
}
