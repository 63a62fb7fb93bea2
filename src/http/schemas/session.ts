import { z } from 'zod'
import { IsoTime } from './common.ts'

/** Whether this browser must sign in, and whether it is (docs/API.md, Dashboard sessions). */
export const SessionState = z.object({
  signInRequired: z.boolean().describe('network access is on: every request needs a key or a session'),
  signedIn: z.boolean().describe('this request carried a live session or a valid key')
})
export type SessionState = z.infer<typeof SessionState>

export const SignInBody = z.object({ apiKey: z.string().min(1).max(256) })

export const SignedIn = z.object({ signedIn: z.literal(true), expiresAt: IsoTime })
export const SignedOut = z.object({ signedIn: z.literal(false) })

export const SignInLink = z.object({
  url: z.string().describe('open once, within expiresAt, to start a browser session'),
  expiresAt: IsoTime
})
export type SignInLink = z.infer<typeof SignInLink>

export const SignInQuery = z.object({ token: z.string().max(256).optional() })
