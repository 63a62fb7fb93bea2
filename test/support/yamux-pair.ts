// Two ends of one yamux stream, in memory: a stream pair with yamux's real flow control, for protocol tests of a peer
// that stops reading. @libp2p/utils' streamPair has a mock muxer that takes whatever is sent (a reader that pauses
// only fills its read buffer until the stream is reset); over yamux, a paused reader sends no more window updates, so
// the writer's window closes after 256 KiB and its writes wait, as they do over a real connection.
import type { TestContext } from 'node:test'
import type { Stream } from '@libp2p/interface'
import { multiaddrConnectionPair } from '@libp2p/utils'
import { yamux } from '@chainsafe/libp2p-yamux'

/** The asking end (outbound) and the serving end (inbound) of one stream on `protocol`; both muxers end in t.after. */
export async function yamuxPair (t: TestContext, protocol: string): Promise<[asker: Stream, server: Stream]> {
  const [outbound, inbound] = multiaddrConnectionPair()
  // No keep-alive pings: nothing here to keep alive, and their timer would hold the test process open.
  const asking = yamux({ enableKeepAlive: false })().createStreamMuxer(outbound)
  const serving = yamux({ enableKeepAlive: false })().createStreamMuxer(inbound)
  t.after(() => {
    asking.abort(new Error('test done'))
    serving.abort(new Error('test done'))
  })
  const arrived = new Promise<Stream>((resolve) => {
    serving.addEventListener('stream', (evt) => { resolve(evt.detail) }, { once: true })
  })
  const asker = await asking.createStream({ protocol })
  const server = await arrived
  // Negotiated by multistream-select on a real connection, which this pair has none of.
  server.protocol = protocol
  return [asker, server]
}
