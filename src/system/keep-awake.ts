import { spawn, type ChildProcess } from 'node:child_process'
import type { Logger } from 'pino'

export interface KeepAwakeStatus {
  active: boolean
  /** The inhibitor in use, or why there is none. */
  method: string | null
  reason: string | null
}

/**
 * Holds a sleep inhibitor while `keep_awake` is on: `systemd-inhibit` on Linux, `caffeinate` on macOS, each running a
 * child that lives as long as we want the machine awake. Where the platform has none, says so instead of pretending.
 */
export class KeepAwake {
  readonly #log: Logger
  #child: ChildProcess | null = null
  #status: KeepAwakeStatus = { active: false, method: null, reason: null }

  constructor (deps: { log: Logger }) {
    this.#log = deps.log
  }

  status (): KeepAwakeStatus {
    return { ...this.#status }
  }

  set (on: boolean): void {
    if (on) this.#start()
    else this.#stop()
  }

  #start (): void {
    if (this.#child != null) return
    const command = inhibitorCommand()
    if (command == null) {
      this.#status = { active: false, method: null, reason: `no sleep inhibitor on ${process.platform}` }
      return
    }
    const child = spawn(command[0], command.slice(1), { stdio: ['ignore', 'ignore', 'pipe'], detached: false })
    let stderr = ''
    child.stderr?.on('data', (chunk: Buffer) => { stderr = (stderr + chunk.toString()).slice(-500) })
    this.#child = child
    this.#status = { active: true, method: command[0], reason: null }
    child.once('error', (err) => {
      // The tool is missing or refused us (no systemd, no D-Bus session): report it in the snapshot.
      this.#log.warn({ err: err.message }, 'sleep inhibitor unavailable')
      if (this.#child === child) {
        this.#child = null
        this.#status = { active: false, method: null, reason: `${command[0]} unavailable: ${err.message}` }
      }
    })
    child.once('exit', (code) => {
      if (this.#child === child) {
        this.#child = null
        const said = stderr.trim().split('\n')[0] ?? ''
        this.#status = { active: false, method: null, reason: `${command[0]} exited with code ${code ?? 'null'}${said === '' ? '' : `: ${said}`}` }
        this.#log.warn({ reason: this.#status.reason }, 'sleep inhibitor ended')
      }
    })
  }

  #stop (): void {
    const child = this.#child
    this.#child = null
    this.#status = { active: false, method: null, reason: null }
    child?.kill()
  }
}

function inhibitorCommand (): string[] | null {
  if (process.platform === 'linux') {
    return ['systemd-inhibit', '--what=sleep:idle', '--who=meshnode', '--why=Serving inference', '--mode=block', 'sleep', 'infinity']
  }
  if (process.platform === 'darwin') return ['caffeinate', '-i', '-w', String(process.pid)]
  return null
}
