// Network namespaces for tests that need a network of their own (Linux, root, iproute2). They exist on this machine
// only, and each test deletes the ones it made.
import { spawnSync } from 'node:child_process'

/** Why namespaces cannot be made here, or null when they can; a test skips with this message. */
export function whyNetnsUnavailable (): string | null {
  if (process.platform !== 'linux') return 'network namespaces are Linux only'
  if (process.getuid?.() !== 0) return 'creating network namespaces needs root (run the tests as root to include this one)'
  const ip = spawnSync('ip', ['-V'])
  if (ip.error != null || ip.status !== 0) return 'the `ip` command (iproute2) is missing'
  const probe = `mnprobe${process.pid}`
  const add = spawnSync('ip', ['netns', 'add', probe])
  if (add.status !== 0) return `ip netns add failed: ${add.stderr.toString().trim()}`
  spawnSync('ip', ['netns', 'del', probe])
  return null
}
