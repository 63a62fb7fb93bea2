// What each patch of a dependency's private internals says about itself once applied, and the warning for one that did
// not take: one definition for every domain that patches a dependency, in src/system/patch-report.ts.
export { warnInactivePatches } from '../../system/patch-report.ts'
export type { PatchLogger, PatchReport } from '../../system/patch-report.ts'
