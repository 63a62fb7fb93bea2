// What a download reports and watches while it runs: its progress and rate (over a sliding window, so a stall shows
// quickly), and the idle alarm that drops a request which has gone quiet. Used by the download engine (download*.ts) only.

const PROGRESS_INTERVAL_MS = 250
const RATE_WINDOW_MS = 5000

export interface DownloadProgress {
  receivedBytes: number
  totalBytes: number | null
  /** Over the last few seconds, so a stall shows quickly and a resumed download does not count old bytes. */
  bytesPerSecond: number
  etaSeconds: number | null
}

/** Aborts its signal when `reset` has not been called for `timeoutMs`: one request's "nothing is coming" alarm. */
export class IdleWatch {
  private readonly controller = new AbortController()
  private readonly timeoutMs: number
  private readonly timer: NodeJS.Timeout

  constructor (timeoutMs: number) {
    this.timeoutMs = timeoutMs
    this.timer = this.arm()
  }

  get signal (): AbortSignal {
    return this.controller.signal
  }

  reset (): void {
    this.timer.refresh()
  }

  stop (): void {
    clearTimeout(this.timer)
  }

  private arm (): NodeJS.Timeout {
    const timer = setTimeout(() => { this.controller.abort(new Error(`idle for ${this.timeoutMs} ms`)) }, this.timeoutMs)
    timer.unref()
    return timer
  }
}

/** Calls onProgress at most every PROGRESS_INTERVAL_MS, and once more at the end. */
export class ProgressReporter {
  private readonly onProgress: ((progress: DownloadProgress) => void) | undefined
  private samples: Array<{ atMs: number, bytes: number }> = []
  private lastEmitMs = -Infinity
  private totalBytes: number | null = null

  constructor (onProgress: ((progress: DownloadProgress) => void) | undefined) {
    this.onProgress = onProgress
  }

  /** A new response starts: bytes already held (or lost to a restart) are not part of the rate. */
  begin (bytes: number): void {
    this.samples = [{ atMs: performance.now(), bytes }]
  }

  update (bytes: number, totalBytes: number | null): void {
    const now = performance.now()
    this.totalBytes = totalBytes
    this.samples.push({ atMs: now, bytes })
    // Keep one sample older than the window as the baseline, so the rate spans the whole window
    while (this.samples.length > 2 && this.samples[1].atMs < now - RATE_WINDOW_MS) this.samples.shift()
    if (now - this.lastEmitMs < PROGRESS_INTERVAL_MS) return
    this.lastEmitMs = now
    this.emit(bytes, totalBytes)
  }

  finish (bytes: number): void {
    this.emit(bytes, bytes)
  }

  private emit (bytes: number, totalBytes: number | null): void {
    if (this.onProgress == null) return
    const first = this.samples[0]
    const last = this.samples[this.samples.length - 1]
    const seconds = first == null || last == null ? 0 : (last.atMs - first.atMs) / 1000
    const bytesPerSecond = seconds > 0 ? (last.bytes - first.bytes) / seconds : 0
    const total = totalBytes ?? this.totalBytes
    const etaSeconds = total == null ? null : bytes >= total ? 0 : bytesPerSecond > 0 ? (total - bytes) / bytesPerSecond : null
    this.onProgress({ receivedBytes: bytes, totalBytes: total, bytesPerSecond, etaSeconds })
  }
}
