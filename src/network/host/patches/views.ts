// Views of libp2p's components for a service we patch: the service is handed an object that answers some keys or
// methods our way and passes everything else to the real one.

/** `target` with some methods replaced; the others still run on `target` itself (they may use private fields). */
export function withMethods<T extends object> (target: T, methods: Partial<T>): T {
  return new Proxy(target, {
    get: (object, key) => {
      if (Object.hasOwn(methods, key)) return methods[key as keyof T]
      const value: unknown = Reflect.get(object, key)
      return typeof value === 'function' ? value.bind(object) : value
    }
  })
}

/**
 * libp2p's components object with some components replaced by `views`. It throws on a key it does not hold, so it
 * cannot be spread into a new object: a service gets this view of it instead.
 */
export function componentsView<T extends object> (components: T, views: Partial<T>): T {
  return new Proxy(components, {
    get: (target, key) => Object.hasOwn(views, key) ? views[key as keyof T] : Reflect.get(target, key)
  })
}
