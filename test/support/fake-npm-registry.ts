// A local stand-in for the npm registry (tests fake only the outer edge, with a local HTTP server and fixtures), serving
// packages made in the test, so that `meshnode gpu install` runs the real npm client without the network.
import { createHash } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { gzipSync } from 'node:zlib'

export interface FakeRegistry {
  /** The registry URL, as `npm_config_registry` takes it. */
  url: string
  /** Packument and tarball requests seen, by path. */
  readonly requests: readonly string[]
  close: () => Promise<void>
}

export interface FakePackage {
  name: string
  version: string
  /** File path inside the package (e.g. `dist/index.js`) to content; package.json is made from name and version. */
  files: Record<string, string>
}

export async function startFakeRegistry (packages: FakePackage[]): Promise<FakeRegistry> {
  const requests: string[] = []
  const tarballs = new Map<string, Buffer>()
  const server = createServer((req, res) => {
    const path = decodeURIComponent((req.url ?? '/').split('?')[0])
    requests.push(path)
    const tarball = tarballs.get(path)
    if (tarball != null) {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': tarball.length })
      res.end(tarball)
      return
    }
    const found = packages.find((p) => path === `/${p.name}`)
    if (found == null) {
      res.writeHead(404, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ error: 'Not found' }))
      return
    }
    const tarballPath = `/${found.name}/-/${found.name.split('/').pop() ?? ''}-${found.version}.tgz`
    const data = tarballs.get(tarballPath) ?? packageTarball(found)
    tarballs.set(tarballPath, data)
    const manifest = {
      name: found.name,
      'dist-tags': { latest: found.version },
      versions: {
        [found.version]: {
          name: found.name,
          version: found.version,
          dist: {
            tarball: `${url}${tarballPath}`,
            // As the real registry says it: what the package takes once unpacked (`meshnode gpu install` shows it)
            unpackedSize: unpackedSize(found),
            shasum: createHash('sha1').update(data).digest('hex'),
            integrity: `sha512-${createHash('sha512').update(data).digest('base64')}`
          }
        }
      }
    }
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify(manifest))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return {
    url,
    requests,
    close: async () => { await new Promise((resolve) => server.close(resolve)) }
  }
}

function packageFiles (pkg: FakePackage): Record<string, string> {
  return { 'package.json': JSON.stringify({ name: pkg.name, version: pkg.version, type: 'module', main: 'dist/index.js', exports: { '.': './dist/index.js' } }), ...pkg.files }
}

function unpackedSize (pkg: FakePackage): number {
  return Object.values(packageFiles(pkg)).reduce((sum, content) => sum + Buffer.byteLength(content), 0)
}

/** A gzipped tar of the package, each file under `package/`, as `npm pack` makes it. */
function packageTarball (pkg: FakePackage): Buffer {
  const files = packageFiles(pkg)
  const blocks: Buffer[] = []
  for (const [name, content] of Object.entries(files)) {
    const body = Buffer.from(content)
    blocks.push(tarHeader(`package/${name}`, body.length), body, Buffer.alloc((512 - (body.length % 512)) % 512))
  }
  blocks.push(Buffer.alloc(1024)) // two empty blocks end the archive
  return gzipSync(Buffer.concat(blocks))
}

/** A ustar header for a regular file. */
function tarHeader (name: string, size: number): Buffer {
  const header = Buffer.alloc(512)
  const field = (value: string, offset: number, length: number): void => { header.write(value, offset, length, 'utf8') }
  const octal = (value: number, length: number): string => value.toString(8).padStart(length - 1, '0') + '\0'
  field(name, 0, 100)
  field(octal(0o644, 8), 100, 8)
  field(octal(0, 8), 108, 8)
  field(octal(0, 8), 116, 8)
  field(octal(size, 12), 124, 12)
  field(octal(0, 12), 136, 12)
  field('        ', 148, 8) // the checksum counts its own field as spaces
  field('0', 156, 1)
  field('ustar\0', 257, 6)
  field('00', 263, 2)
  let sum = 0
  for (const byte of header) sum += byte
  field(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8)
  return header
}
