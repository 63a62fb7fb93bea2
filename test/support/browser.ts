// A real headless Chromium for the dashboard tests, driven by playwright-core: the system's Chromium (Debian's
// `chromium` package; Playwright's own browser download is not used), one browser shared by a test file.
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import type { TestContext } from 'node:test'
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core'

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome', '/usr/bin/google-chrome-stable']

/** `$MESHNODE_CHROMIUM`, else the first system Chromium found; null when there is none. */
export function findChromium (): string | null {
  const fromEnv = process.env.MESHNODE_CHROMIUM
  if (fromEnv != null && fromEnv !== '') return existsSync(fromEnv) ? fromEnv : null
  return CANDIDATES.find((path) => existsSync(path)) ?? null
}

/** For `test(name, { skip: NO_CHROMIUM }, ...)`: false when a Chromium is here, else the reason, printed by the runner. */
export const NO_CHROMIUM: string | false = findChromium() == null
  ? `no Chromium found (looked at ${process.env.MESHNODE_CHROMIUM != null && process.env.MESHNODE_CHROMIUM !== '' ? `$MESHNODE_CHROMIUM=${process.env.MESHNODE_CHROMIUM}` : CANDIDATES.join(', ')}): ` +
    'install it with `apt-get install -y chromium` (or point $MESHNODE_CHROMIUM at one) to run the dashboard browser tests'
  : false

/**
 * Headless, sandbox off (CI runs as root), and nothing that phones out: without the background-networking flags
 * Chromium floods a closed network with refused connections. Playwright gives each launch a fresh profile.
 */
export async function launchChromium (): Promise<Browser> {
  const executablePath = findChromium()
  if (executablePath == null) throw new Error(String(NO_CHROMIUM))
  return await chromium.launch({
    executablePath,
    headless: true,
    args: [
      '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-default-apps', '--disable-extensions',
      '--metrics-recording-only', '--no-default-browser-check'
    ]
  })
}

/** A fresh browser context (its own cookies and storage) with one page, closed in t.after. */
export async function openPage (t: TestContext, browser: Browser, options: { viewport?: { width: number, height: number } } = {}): Promise<{ context: BrowserContext, page: Page }> {
  const context = await browser.newContext({ viewport: options.viewport ?? { width: 1200, height: 800 }, locale: 'en-US' })
  await context.grantPermissions(['clipboard-read', 'clipboard-write'])
  t.after(() => context.close())
  const page = await context.newPage()
  // A page error is a bug in the dashboard: fail the test that caused it
  const errors: Error[] = []
  page.on('pageerror', (err) => { errors.push(err) })
  t.after(() => { if (errors.length > 0) throw new Error(`page errors: ${errors.map((e) => e.message).join('; ')}`) })
  return { context, page }
}

const require = createRequire(import.meta.url)
let axeSource: string | null = null

export interface AxeViolation { id: string, impact: string | null, help: string, nodes: Array<{ target: string[] }> }

/**
 * Runs axe-core in the page and returns the violations of impact `serious` or `critical`. The script is evaluated
 * through the DevTools protocol, which the page's CSP (scripts from the node only) does not govern.
 */
export async function seriousA11yViolations (page: Page): Promise<AxeViolation[]> {
  axeSource ??= await readFile(require.resolve('axe-core/axe.min.js'), 'utf8')
  await page.evaluate(axeSource)
  const violations = await page.evaluate(async () => {
    const axe = (globalThis as unknown as { axe: { run: (context: Document, options: unknown) => Promise<{ violations: AxeViolation[] }> } }).axe
    const result = await axe.run(document, { resultTypes: ['violations'] })
    return result.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map((n) => ({ target: n.target })) }))
  })
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
}

/**
 * Presses Tab until focus comes back round (or `limit` presses) and returns the controls that were never focused:
 * every enabled button, link, input, select and textarea that is visible must be reachable by keyboard. A group of
 * radio buttons is one stop, as browsers make it (Tab reaches the checked one, the arrow keys the others).
 */
export async function unreachableByKeyboard (page: Page, limit = 300): Promise<string[]> {
  await page.evaluate(() => {
    let n = 0
    for (const element of document.querySelectorAll<HTMLElement>('a[href], button, input, select, textarea, summary, [tabindex]')) {
      element.dataset.kbd = String(n++)
    }
    ;(document.activeElement as HTMLElement | null)?.blur()
  })
  const seen = new Set<string>()
  for (let i = 0; i < limit; i++) {
    await page.keyboard.press('Tab')
    const id = await page.evaluate(() => (document.activeElement as HTMLElement | null)?.dataset.kbd ?? null)
    if (id != null && seen.has(id) && seen.size > 1) break
    if (id != null) seen.add(id)
  }
  return await page.evaluate((reached) => {
    const missed: string[] = []
    const radioGroup = (element: HTMLElement): string | null =>
      element instanceof HTMLInputElement && element.type === 'radio' && element.name !== '' ? element.name : null
    const reachedGroups = new Set<string>()
    for (const element of document.querySelectorAll<HTMLElement>('[data-kbd]')) {
      const group = radioGroup(element)
      if (group != null && reached.includes(element.dataset.kbd ?? '')) reachedGroups.add(group)
    }
    for (const element of document.querySelectorAll<HTMLElement>('[data-kbd]')) {
      const disabled = (element as HTMLButtonElement).disabled === true || element.getAttribute('tabindex') === '-1'
      const visible = element.getClientRects().length > 0 && getComputedStyle(element).visibility !== 'hidden'
      const group = radioGroup(element)
      if (!disabled && visible && !reached.includes(element.dataset.kbd ?? '') && (group == null || !reachedGroups.has(group))) {
        missed.push(`${element.tagName.toLowerCase()} "${(element.textContent ?? '').trim().slice(0, 40) || element.getAttribute('aria-label') || element.id}"`)
      }
    }
    return missed
  }, [...seen])
}

/** Where screenshots go: docs/screenshots when MESHNODE_SCREENSHOTS=1 (to refresh the README's), else a temp dir. */
export function screenshotPath (dir: string, name: string): string {
  return process.env.MESHNODE_SCREENSHOTS === '1'
    ? join(import.meta.dirname, '..', '..', 'docs', 'screenshots', `${name}.png`)
    : join(dir, `${name}.png`)
}
