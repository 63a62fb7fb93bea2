import { cpus, totalmem } from 'node:os'
import { readFileSync } from 'node:fs'

export interface HardwareInfo {
  cpu: string
  cores: number
  memoryGB: number
  gpu: string | null
}

/**
 * What this machine offers for inference. GPU detection looks only at what the OS exposes without extra tools
 * (NVIDIA's driver files on Linux); the node runs llama.cpp's CPU build either way.
 */
export function detectHardware (): HardwareInfo {
  const list = cpus()
  return {
    cpu: list[0]?.model.trim() ?? 'unknown',
    cores: list.length,
    memoryGB: Math.round((totalmem() / 1024 ** 3) * 10) / 10,
    gpu: detectGpu()
  }
}

function detectGpu (): string | null {
  if (process.platform !== 'linux') return null
  try {
    const version = readFileSync('/proc/driver/nvidia/version', 'utf8')
    return /NVIDIA/.test(version) ? 'NVIDIA GPU' : null
  } catch (err) {
    // No NVIDIA driver: the normal case on a CPU-only machine.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
}
