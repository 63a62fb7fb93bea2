// What each patch of a dependency's private internals says about itself once applied, shared by every domain that
// patches one (the inference's node-llama-cpp and V8, the network's libp2p modules). A patch written against one
// version of a dependency may find another shape there after an upgrade; it then leaves the dependency alone and says
// so here, never silently: the node warns once, and the patch's test fails at the pinned version.

export interface PatchReport {
  /** The patch, kebab-case: `sampling-guard`, `expose-gc`… (docs/UPGRADING.md lists each with its check). */
  readonly name: string
  /**
   * The dependency patched, with the version found: `node-llama-cpp 3.22.1`, `V8 13.6.233.17-node.53`; a patch whose
   * shape spans several packages names each: `@libp2p/dcutr 3.0.28, @libp2p/tcp 11.0.28, libp2p 3.3.11`.
   */
  readonly dependency: string
  /** What breaks without it, in a line. */
  readonly reason: string
  /** Whether it took: false when what it patches is not the shape it was written for. */
  readonly active: boolean
  /** What was found instead when it did not take; or how it applies (per model, when a GPU package is installed). */
  readonly detail?: string
}

/** The part of a pino logger that patch reports are written to. */
export interface PatchLogger {
  warn: (obj: object, msg?: string) => void
}

/** Warns once per patch that did not take, naming it, its dependency and what it found; active ones say nothing. */
export function warnInactivePatches (log: PatchLogger, reports: readonly PatchReport[]): void {
  for (const report of reports) {
    if (report.active) continue
    log.warn({ patch: report.name, dependency: report.dependency, reason: report.reason, detail: report.detail },
      `the ${report.name} patch of ${report.dependency} did not apply: ${report.reason}`)
  }
}
