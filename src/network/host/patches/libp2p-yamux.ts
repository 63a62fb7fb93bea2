// Every patch meshnode makes to @chainsafe/libp2p-yamux's private internals, applied here and reported
// (`yamuxPatches`). One so far: its control frames made safe to send on a connection that is already gone.
//
// @chainsafe/libp2p-yamux 8.0.1 sends some frames where nothing can catch a throw, and the message streams of
// @libp2p/utils 7 throw from a synchronous `send()` once the connection under them is closed (StreamStateError
// "Cannot write to a stream that is closed", abstract-message-stream.js `send`). A throw there is an uncaught
// exception, which ends `meshnode serve` (src/cli/commands/serve.ts). The frames:
// - a new stream's opening window update, queued with queueMicrotask in `YamuxMuxer.onCreateStream`: when the
//   connection is aborted in the same tick the stream was opened (identify opens one on every 'connection:open', and
//   ConnectionPolicy closes a duplicate connection in that same dispatch), the update still goes out once yamux knows
//   the connection's rtt (it doubles the window of a stream younger than 4 rtt, stream.js);
// - the GoAway of `YamuxMuxer.abort`, called from the muxer's own 'message' listener when a frame fails
//   (abstract-stream-muxer.js) and from `Connection.abort`;
// - window updates and ping answers sent while reading frames.
// Such a frame is for a peer that can no longer be reached, so it is dropped when the transport refuses it. Frames
// someone awaits still throw: data (the stream's `send` aborts the stream and reports it), a FIN (`stream.close()`
// rejects) and our own ping (`ping()` rejects).
//
// The patch checks the shape it was written for (the private `sendFrame` and how streams reach it, the frame numbers,
// the refusal it catches) and, finding another, leaves yamux alone and reports what it found: the host warns when it
// starts (libp2p-node.ts, relay.ts), and test/network/patches.test.ts fails. docs/UPGRADING.md lists it.
import { yamux as libp2pYamux } from '@chainsafe/libp2p-yamux'
import { StreamStateError } from '@libp2p/interface'
import type { PatchReport } from '../../../system/patch-report.ts'
import { firstProblem, installed, missingText, reportOf } from './shape.ts'

// Frame types and flags of the yamux protocol, as the package numbers them (it exports its enums as types only; the
// check below holds them to its frame.js).
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

const YAMUX = '@chainsafe/libp2p-yamux'
const UTILS = '@libp2p/utils'

/** What `unawaited-frames-dropped` was written against; null when the installed packages match it. */
function unawaitedFramesProblem (): string | null {
  return firstProblem([
    // the private method every frame goes through, and each stream taking it from its muxer when it is created (so an
    // own property of the muxer, set before its first stream, is what every stream calls)
    () => missingText(YAMUX, 'dist/src/muxer.js', ['sendFrame(header, data) {', 'sendFrame: this.sendFrame.bind(this),']),
    () => missingText(YAMUX, 'dist/src/frame.js', [
      `FrameType[FrameType["WindowUpdate"] = ${FRAME_WINDOW_UPDATE}]`, `FrameType[FrameType["Ping"] = ${FRAME_PING}]`,
      `FrameType[FrameType["GoAway"] = ${FRAME_GO_AWAY}]`, `Flag[Flag["ACK"] = ${FLAG_ACK}]`, `Flag[Flag["FIN"] = ${FLAG_FIN}]`
    ]),
    // the refusal of a closed connection, the one error dropped
    () => missingText(UTILS, 'dist/src/abstract-message-stream.js', [
      "send(data) { if (this.writeStatus === 'closed' || this.writeStatus === 'closing') { throw new StreamStateError("
    ])
  ])
}

// A module-level memo, which the code otherwise avoids, and why: the installed packages do not change while the
// process runs, and every muxer asks.
let checked: PatchReport[] | undefined

/** Applies (for each muxer `yamux()` makes) every patch of @chainsafe/libp2p-yamux, and says whether each took. */
export function yamuxPatches (): PatchReport[] {
  checked ??= [reportOf({
    name: 'unawaited-frames-dropped',
    dependency: installed(YAMUX, UTILS),
    reason: 'a window update, ping answer or GoAway sent to a connection aborted in the tick a stream opened on it is an uncaught exception, which ends the process'
  }, unawaitedFramesProblem())]
  return checked
}

function active (name: string): boolean {
  return yamuxPatches().some((report) => report.name === name && report.active)
}

/** `muxer` (a YamuxMuxer, before any stream exists on it), dropping the unawaited frames a closed connection refuses. */
export function dropUnawaitedFrames<T extends object> (muxer: T): T {
  if (!active('unawaited-frames-dropped')) return muxer
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

/** `yamux()` of @chainsafe/libp2p-yamux, whose muxers drop unawaited frames the closed connection refuses. */
export function yamux (init?: Parameters<typeof libp2pYamux>[0]): ReturnType<typeof libp2pYamux> {
  const create = libp2pYamux(init)
  return () => {
    const factory = create()
    const createStreamMuxer = factory.createStreamMuxer.bind(factory)
    factory.createStreamMuxer = (maConn) => dropUnawaitedFrames(createStreamMuxer(maConn))
    return factory
  }
}
