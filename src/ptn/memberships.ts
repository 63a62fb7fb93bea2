// How many PTNs one node may be in, and which of its certificates its capability record carries first.

/**
 * Memberships in effect (`active` or `recovered`) one node may hold: a create, join or recover past it is refused
 * (409). Bounded because every membership is looked at each time the record is read again and each time a
 * peer's request is weighed for reserved slots, and its certificate checked again whenever one changes; far above
 * what a node needs.
 */
export const MAX_PTN_MEMBERSHIPS = 128

export interface OwnCertificate {
  ptnID: string
  certData: string
}

/**
 * The certificates a record of at most `limit` carries (peers accept only so many: the network's
 * MAX_ADVERTISED_CERTIFICATES, fewer than MAX_PTN_MEMBERSHIPS). All of them, in join order, when they fit: the record
 * then changes only when a membership does. Otherwise the `limit` most needed: first the PTNs shared with the most
 * connected peers (whose members can use this node's reserved slots and see it in PTN-scoped routing now), then the
 * most recently joined. `certificates` come oldest joined first.
 */
export function certificatesByUse (certificates: readonly OwnCertificate[], peers: ReadonlyArray<{ readonly ptnIDs: readonly string[] }>, limit: number): string[] {
  if (certificates.length <= limit) return certificates.map(({ certData }) => certData)
  const sharing = new Map<string, number>()
  for (const peer of peers) {
    for (const ptnID of new Set(peer.ptnIDs)) sharing.set(ptnID, (sharing.get(ptnID) ?? 0) + 1)
  }
  return certificates
    .map((certificate, joinedRank) => ({ ...certificate, joinedRank, peers: sharing.get(certificate.ptnID) ?? 0 }))
    .sort((a, b) => b.peers - a.peers || b.joinedRank - a.joinedRank)
    .slice(0, limit)
    .map(({ certData }) => certData)
}
