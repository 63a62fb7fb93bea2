// The yamux stream muxer, with its unawaited control frames made safe to send on a connection that is already gone.
//
// @chainsafe/libp2p-yamux 8.0.1 (the newest) sends some frames where nothing can catch a throw, and the message streams
// of @libp2p/utils 7 throw from a synchronous `send()` once the connection under them is closed (StreamStateError
// "Cannot write to a stream that is closed", abstract-message-stream.js `send`). A throw there is an uncaught
// exception, which ends `meshnode serve` (src/cli/commands/serve.ts). The frames:
// - a new stream's opening window update, queued with queueMicrotask in `YamuxMuxer.onCreateStream` (muxer.js:126):
//   when the connection is aborted in the same tick the stream was opened (identify opens one on every
//   'connection:open', and ConnectionPolicy closes a duplicate connection in that same dispatch), the update still goes
//   out once yamux knows the connection's rtt (it doubles the window of a stream younger than 4 rtt, stream.js:231);
// - the GoAway of `YamuxMuxer.abort` (muxer.js:211), called from the muxer's own 'message' listener when a frame
//   fails (abstract-stream-muxer.js:27) and from `Connection.abort`;
// - window updates and ping answers sent while reading frames.
// Such a frame is for a peer that can no longer be reached, so it is dropped when the transport refuses it. Frames
// someone awaits still throw: data (the stream's `send` aborts the stream and reports it), a FIN (`stream.close()`
// rejects) and our own ping (`ping()` rejects).
import { yamux as libp2pYamux } from '@chainsafe/libp2p-yamux'
import { StreamStateError } from '@libp2p/interface'

// Frame types and flags of the yamux spec (the package exports its enums as types only).
const FRAME_WINDOW_UPDATE = 1
const FRAME_PING = 2
const FRAME_GO_AWAY = 3
const FLAG_ACK = 2
const FLAG_FIN = 4

interface FrameHeader { type: number, flag: number }
/** `YamuxMuxer.sendFrame`, private in its types: every frame the muxer and its streams send goes through it. */
interface FrameSender { sendFrame: (header: FrameHeader, data?: unknown) => boolean }

/** Whether nobody awaits `header`'s frame: a throw sending it would go uncaught. */
export function isUnawaitedFrame (header: FrameHeader): boolean {
  if (header.type === FRAME_WINDOW_UPDATE) return (header.flag & FLAG_FIN) === 0
  if (header.type === FRAME_PING) return (header.flag & FLAG_ACK) !== 0
  return header.type === FRAME_GO_AWAY
}

/** `yamux()` of @chainsafe/libp2p-yamux, whose muxers drop unawaited frames the closed connection refuses. */
export function yamux (init?: Parameters<typeof libp2pYamux>[0]): ReturnType<typeof libp2pYamux> {
  const create = libp2pYamux(init)
  return () => {
    const factory = create()
    const createStreamMuxer = factory.createStreamMuxer.bind(factory)
    factory.createStreamMuxer = (maConn) => {
      const muxer = createStreamMuxer(maConn)
      // An own property, set before any stream exists: each stream binds the muxer's `sendFrame` when it is created.
      const sender = muxer as unknown as FrameSender
      const sendFrame = sender.sendFrame.bind(muxer)
      sender.sendFrame = (header, data) => {
        try {
          return sendFrame(header, data)
        } catch (err) {
          if (err instanceof StreamStateError && isUnawaitedFrame(header)) return false
          throw err
        }
      }
      return muxer
    }
    return factory
  }
}
