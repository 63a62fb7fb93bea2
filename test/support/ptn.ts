// PTN helpers for tests: read a CA key the way only the node's owner can (from its data dir), to make documents the
// API never would (expired certificates and invites) and to check that keys stay where they belong.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { identityFromSeed, type NodeIdentity } from '../../src/identity/index.ts'

export function caKeyPath (dataDir: string, ptnID: string): string {
  return join(dataDir, 'ptn', `${ptnID}.key`)
}

/** The hex seed of a PTN's CA key as the node stored it. */
export function readCaKeyHex (dataDir: string, ptnID: string): string {
  const [, hex] = readFileSync(caKeyPath(dataDir, ptnID), 'utf8').trim().split('\n')
  return hex
}

export function readCa (dataDir: string, ptnID: string): NodeIdentity {
  return identityFromSeed(new Uint8Array(Buffer.from(readCaKeyHex(dataDir, ptnID), 'hex')))
}

/** Decodes `certData` or an invite code (for assertions only; the node verifies them). */
export function decodeDocument (text: string): { payload: Record<string, string>, signature: string } {
  return JSON.parse(Buffer.from(text, 'base64url').toString('utf8'))
}

export function encodeDocument (document: unknown): string {
  return Buffer.from(JSON.stringify(document)).toString('base64url')
}
