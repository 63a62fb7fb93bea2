// How numbers read on the page: bytes in decimal units (as max_storage_gb counts them), durations, credits.

const BYTE_UNITS = ['B', 'kB', 'MB', 'GB', 'TB']

export function formatBytes (bytes: number | null | undefined): string {
  if (bytes == null || !Number.isFinite(bytes)) return '—'
  let value = bytes
  let unit = 0
  while (value >= 1000 && unit < BYTE_UNITS.length - 1) {
    value /= 1000
    unit++
  }
  return `${unit === 0 ? value : value.toFixed(value >= 100 ? 0 : 1)} ${BYTE_UNITS[unit]}`
}

export function formatRate (bytesPerSecond: number | null | undefined): string {
  return bytesPerSecond == null ? '—' : `${formatBytes(bytesPerSecond)}/s`
}

/** 75 → "1m 15s"; 3700 → "1h 1m". */
export function formatDuration (seconds: number | null | undefined): string {
  if (seconds == null || !Number.isFinite(seconds)) return '—'
  const s = Math.max(0, Math.round(seconds))
  const h = Math.floor(s / 3600)
  const m = Math.floor((s % 3600) / 60)
  if (h > 0) return `${h}h ${m}m`
  if (m > 0) return `${m}m ${s % 60}s`
  return `${s}s`
}

/** Credits with up to 6 decimals (micro-credits), never in exponent form. */
export function formatCredits (credits: number): string {
  return credits.toLocaleString('en-US', { maximumFractionDigits: 6, useGrouping: false })
}

export function formatTime (iso: string | null | undefined, language: string): string {
  if (iso == null) return '—'
  const date = new Date(iso)
  return Number.isNaN(date.getTime()) ? iso : date.toLocaleString(language)
}

/** The first 8 and last 4 characters of a long hex id, for tables; the full id stays in the title and copy. */
export function shortID (id: string): string {
  return id.length <= 16 ? id : `${id.slice(0, 8)}…${id.slice(-4)}`
}
