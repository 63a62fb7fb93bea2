import { pino, type Logger } from 'pino'
import { prettyStream, type LogFormat } from './log-format.ts'

/**
 * Structured logs, JSON or pretty. Secrets never reach them: request headers are not logged by fastify's serializers,
 * and the redaction list below catches the fields where a key, token or private key could appear if someone logged
 * them. The pretty format is made from the same (redacted) JSON record, so it cannot show more than JSON would.
 */
export function createLogger (level: string, destination?: NodeJS.WritableStream, format: LogFormat = 'json'): Logger {
  const out = destination ?? process.stdout
  const stream = format === 'pretty'
    ? prettyStream(out, { colors: (out as { isTTY?: boolean }).isTTY === true && process.env.NO_COLOR == null })
    : destination
  return pino({
    level,
    redact: {
      paths: [
        'req.headers.authorization', 'headers.authorization', 'authorization',
        'key', '*.key', 'token', '*.token', 'adminToken', 'caKeyHex', '*.caKeyHex', 'seed', '*.seed', 'privateKey', '*.privateKey',
        'cluster_passcode', '*.cluster_passcode', 'passcode'
      ],
      censor: '[redacted]'
    }
  }, stream as pino.DestinationStream | undefined)
}
