import { QueueFullError } from './errors.ts'

export interface SlotPoolOptions {
  /** Most requests that may wait for a slot; one more is refused with QueueFullError. */
  queueSize: number
  /** The hint QueueFullError carries. */
  retryAfterSeconds: number
  /** Called each time `busy` or `queued` changes (a slot taken or given back, a waiter in or out); must not throw. */
  changed?: () => void
}

interface Waiter<T> {
  resolve: (slot: T) => void
  reject: (reason: unknown) => void
  forget: () => void
}

export interface AcquireOptions<T> {
  /** Rejects the wait with `signal.reason` when aborted. */
  signal?: AbortSignal
  /** Which of the free slots to take (an index into `free`); default the one freed last. */
  choose?: (free: readonly T[]) => number
}

/**
 * A fixed set of slots (context sequences) handed out first come, first served. A caller that finds several free
 * may choose among them (the one whose cache serves it best); a released slot goes straight to the oldest waiter, so
 * a request queued behind an aborted one starts in the same tick the slot comes free.
 */
export class SlotPool<T extends object> {
  readonly size: number
  private readonly free: T[]
  private readonly waiters: Array<Waiter<T>> = []
  private readonly options: SlotPoolOptions
  private closedReason: Error | null = null

  constructor (slots: readonly T[], options: SlotPoolOptions) {
    this.size = slots.length
    this.free = [...slots]
    this.options = options
  }

  get busy (): number {
    return this.size - this.free.length
  }

  get queued (): number {
    return this.waiters.length
  }

  /** A free slot, or a place in the queue; rejects with `signal.reason` if the caller gives up while waiting. */
  async acquire (options: AcquireOptions<T> = {}): Promise<T> {
    const { signal, choose } = options
    if (this.closedReason != null) throw this.closedReason
    signal?.throwIfAborted()
    if (this.free.length > 0) {
      const chosen = choose?.(this.free) ?? this.free.length - 1
      const index = Number.isInteger(chosen) && chosen >= 0 && chosen < this.free.length ? chosen : this.free.length - 1
      const [slot] = this.free.splice(index, 1)
      this.options.changed?.()
      return slot
    }
    if (this.waiters.length >= this.options.queueSize) {
      throw new QueueFullError(this.options.queueSize, this.options.retryAfterSeconds)
    }
    return await new Promise<T>((resolve, reject) => {
      const onAbort = (): void => {
        this.waiters.splice(this.waiters.indexOf(waiter), 1)
        this.options.changed?.()
        reject(signal?.reason)
      }
      const waiter: Waiter<T> = { resolve, reject, forget: () => signal?.removeEventListener('abort', onAbort) }
      signal?.addEventListener('abort', onAbort, { once: true })
      this.waiters.push(waiter)
      this.options.changed?.()
    })
  }

  release (slot: T): void {
    const next = this.waiters.shift()
    if (next == null) {
      this.free.push(slot)
      this.options.changed?.()
      return
    }
    next.forget()
    this.options.changed?.()
    next.resolve(slot)
  }

  /** Refuses every waiter and every later `acquire` with `reason`; slots already out may still be released. */
  close (reason: Error): void {
    this.closedReason = reason
    const waiters = this.waiters.splice(0)
    if (waiters.length > 0) this.options.changed?.()
    for (const waiter of waiters) {
      waiter.forget()
      waiter.reject(reason)
    }
  }
}
