/**
 * Which methods each route path has, so that a known path asked with another method answers 405 with `Allow`
 * instead of 404. Filled from fastify's onRoute hook; patterns use fastify's `:param` and `*` syntax.
 */
export class RouteTable {
  readonly #routes = new Map<string, { pattern: RegExp, methods: Set<string> }>()

  add (methods: string | string[], url: string): void {
    let route = this.#routes.get(url)
    if (route == null) {
      route = { pattern: patternOf(url), methods: new Set() }
      this.#routes.set(url, route)
    }
    for (const method of Array.isArray(methods) ? methods : [methods]) route.methods.add(method.toUpperCase())
  }

  /** Every method some route serves at `path` (a request path without its query), sorted; [] for an unknown path. */
  methodsFor (path: string): string[] {
    const methods = new Set<string>()
    for (const route of this.#routes.values()) {
      if (route.pattern.test(path)) for (const method of route.methods) methods.add(method)
    }
    return [...methods].sort()
  }
}

function patternOf (url: string): RegExp {
  const source = url.split('/').map((segment) => {
    if (segment.startsWith(':')) return '[^/]+'
    if (segment === '*') return '.*'
    return segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  }).join('/')
  return new RegExp(`^${source}$`)
}
