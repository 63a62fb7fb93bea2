export { openDatabase, inTransaction } from './database.ts'
export type { Database } from './database.ts'
export { writeFileAtomic } from './files.ts'
export { lockDataDir, DataDirInUseError, DATA_DIR_LOCK_FILE } from './data-dir-lock.ts'
