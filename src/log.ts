import { pino, type Logger } from 'pino'

/**
 * Structured JSON logs. Secrets never reach them: request headers are not logged by fastify's serializers, and the
 * redaction list below catches the fields where a key, token or private key could appear if someone logged them.
 */
export function createLogger (level: string, destination?: NodeJS.WritableStream): Logger {
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
  }, destination as pino.DestinationStream | undefined)
}
