import { cpus, totalmem } from 'node:os'
import { readFileSync, readdirSync } from 'node:fs'
import { join } from 'node:path'

export interface HardwareInfo {
  cpu: string
  cores: number
  memoryGB: number
  gpu: string | null
}

/**
 * What this machine offers for inference. GPU detection looks only at what the OS exposes without extra tools
 * (on Linux, NVIDIA's driver files, then the PCI vendor of each display device); the node runs llama.cpp's CPU
 * build either way.
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

/**
 * PCI vendors of the display devices Vulkan can run on. Others are left out on purpose: a server's management chip
 * (ASPEED) or a virtual machine's display (QEMU, VMware, virtio) shows as a card too but computes nothing. NVIDIA
 * counts only with its driver (above): CUDA needs it.
 */
const GPU_VENDORS: Readonly<Record<string, string>> = { '0x1002': 'AMD GPU', '0x8086': 'Intel GPU' }
const DRM_DIR = '/sys/class/drm'

function detectGpu (): string | null {
  if (process.platform !== 'linux') return null
  try {
    const version = readFileSync('/proc/driver/nvidia/version', 'utf8')
    if (/NVIDIA/.test(version)) return 'NVIDIA GPU'
  } catch (err) {
    // No NVIDIA driver: the normal case on a machine without an NVIDIA GPU.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  return displayDeviceVendor()
}

function displayDeviceVendor (): string | null {
  let cards: string[]
  try {
    cards = readdirSync(DRM_DIR).filter((name) => /^card\d+$/.test(name))
  } catch (err) {
    // No DRM at all (a container, a server without display devices): no GPU to see
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  for (const card of cards) {
    try {
      const vendor = GPU_VENDORS[readFileSync(join(DRM_DIR, card, 'device', 'vendor'), 'utf8').trim()]
      if (vendor != null) return vendor
    } catch (err) {
      // A card without a PCI device behind it (a virtual display): not a GPU
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    }
  }
  return null
}
