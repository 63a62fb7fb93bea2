import { spawn } from 'node:child_process'
import type { Command } from 'commander'
import type { SignInLink } from '../../http/schemas/session.ts'
import { print } from '../output.ts'
import { clientFor, withClientOptions } from './common.ts'

/**
 * `meshnode dashboard`: asks the node for a one-time sign-in link (with the local admin token, or --api-key) and
 * opens the browser on it, like Jupyter's token link. The link works once, within 5 minutes, and becomes an
 * HttpOnly session cookie; the token leaves the address bar with the redirect that redeems it.
 */
export function registerDashboard (program: Command): void {
  withClientOptions(program.command('dashboard').description('open the dashboard in the browser, signed in'))
    .option('--no-open', 'print the one-time link instead of opening a browser')
    .action(async (_options, command: Command) => {
      const { client, options } = clientFor(command)
      const link = await client.post<SignInLink>('/v1/app/session/link', {})
      const open = (command.opts<{ open: boolean }>()).open
      const opened = open ? await openBrowser(link.url) : null
      print(link, options.json, () => opened == null
        ? `Open this link within 5 minutes (it works once):\n${link.url}`
        : opened
          ? `Opening the dashboard in your browser. If it does not open, use this link within 5 minutes (it works once):\n${link.url}`
          : `Could not start a browser. Open this link within 5 minutes (it works once):\n${link.url}`)
    })
}

/** `$BROWSER` when set (as Python's webbrowser and Jupyter honour it), else the platform's opener. */
async function openBrowser (url: string): Promise<boolean> {
  const browser = process.env.BROWSER
  const [cmd, args] = browser != null && browser !== ''
    ? [browser, [url]]
    : process.platform === 'darwin'
      ? ['open', [url]]
      : process.platform === 'win32'
        ? ['cmd', ['/c', 'start', '""', url.replaceAll('&', '^&')]]
        : ['xdg-open', [url]]
  return await new Promise((resolve) => {
    const child = spawn(cmd, args, { detached: true, stdio: 'ignore' })
    // No opener installed (a server without a desktop): say so and print the link instead
    child.once('error', () => { resolve(false) })
    child.once('spawn', () => {
      child.unref()
      resolve(true)
    })
  })
}
