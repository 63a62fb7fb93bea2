export { openDatabase, inTransaction } from './database.ts'
export type { Database } from './database.ts'
export { writeFileAtomic } from './files.ts'
