// The dashboard in a real headless Chromium (the acceptance test), against real nodes: one browser for the whole
// file, a fresh context (cookies, storage) per test. Skipped, saying why, where no Chromium is installed.
import { after, before, test } from 'node:test'
import type { TestContext } from 'node:test'
import assert from 'node:assert/strict'
import { join } from 'node:path'
import type { Browser, Page } from 'playwright-core'
import { NO_CHROMIUM, launchChromium, openPage, screenshotPath, seriousA11yViolations, unreachableByKeyboard } from '../support/browser.ts'
import { runCli } from '../support/cli.ts'
import { startFakeHub } from '../support/fake-hub.ts'
import { startTestRelay, startWanNode, waitForPeers } from '../support/network.ts'
import { startTestNode, tempDir, waitFor, type TestNode } from '../support/node.ts'
import { writeTinyGguf } from '../support/tiny-gguf.ts'
import { formatBytes } from '../../dashboard/src/format.ts'

const skip = NO_CHROMIUM
let browser: Browser
before(async () => { if (skip === false) browser = await launchChromium() })
after(async () => { await browser?.close() })

/** Opens `#/<page>` on the node and waits for its heading. */
async function visit (page: Page, node: TestNode, route: string, heading: string | RegExp): Promise<void> {
  await page.goto(`${node.node.url}/#/${route}`)
  await page.getByRole('heading', { level: 1, name: heading }).waitFor()
}

/** What a value that was not turned into words reads as on the page: `[object Object]`, `undefined`, `NaN`. */
async function unreadable (page: Page): Promise<string[]> {
  return (await page.locator('body').innerText()).match(/\[object \w+\]|\bundefined\b|\bNaN\b/g) ?? []
}

/** The settings page shows no literal backtick; the value a hint names (`peers`) shows as code in that field's hint. */
async function backtickFree (page: Page, backendLabel: string): Promise<void> {
  await page.getByLabel(backendLabel).waitFor()
  assert.ok(!(await page.locator('body').innerText()).includes('`'), 'no literal backtick')
  const hintID = await page.getByLabel(backendLabel).getAttribute('aria-describedby')
  assert.equal(await page.locator(`[id="${hintID}"] code`).textContent(), 'peers')
}

async function shot (t: TestContext, page: Page, name: string): Promise<void> {
  await page.evaluate(() => { scrollTo(0, 0) })
  await page.screenshot({ path: screenshotPath(await tempDir(t, 'meshnode-shots-'), name) })
}

test('the overview shows the node; every page passes axe (no serious violation) and the keyboard reaches every control', { skip }, async (t) => {
  const node = await startTestNode(t, { name: 'dashboard-node' })
  // Rows on every page, so the scans see tables, forms and their actions, not only empty states
  assert.equal((await node.api.post('/v1/app/apikeys', { name: 'ci' })).status, 200)
  assert.equal((await node.api.post('/v1/app/ptn/create', { name: 'lab' })).status, 200)
  const { page } = await openPage(t, browser)

  await visit(page, node, 'overview', 'Overview')
  assert.equal(await page.getByTestId('overview-name').textContent(), 'dashboard-node')
  assert.equal(await page.getByTestId('overview-node-id').textContent(), node.nodeID)
  assert.equal(await page.getByTestId('overview-balance').textContent(), '100')
  await page.getByRole('button', { name: 'Copy node ID' }).click()
  await page.getByRole('button', { name: 'Copied' }).waitFor()
  assert.equal(await page.evaluate(async () => await navigator.clipboard.readText()), node.nodeID)
  await shot(t, page, 'overview')

  const pages: Array<[string, string]> = [['overview', 'Overview'], ['models', 'Models'], ['chat', 'Chat'], ['peers', 'Peers'],
    ['wallet', 'Wallet'], ['ptn', 'Private networks'], ['keys', 'API keys'], ['settings', 'Settings']]
  for (const [route, heading] of pages) {
    await visit(page, node, route, heading)
    if (route === 'ptn') {
      await page.getByRole('button', { name: 'Manage lab' }).click()
      await page.getByRole('heading', { name: 'Manage lab' }).waitFor()
    }
    if (route === 'settings') await page.getByLabel('Language').waitFor()
    assert.deepEqual(await unreadable(page), [], `every value on ${route} reads as words`)
    const violations = await seriousA11yViolations(page)
    assert.deepEqual(violations.map((v) => `${v.id}: ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`), [], `axe on ${route}`)
    assert.deepEqual(await unreachableByKeyboard(page), [], `keyboard on ${route}`)
  }
})

test('the overview puts every field of the node\'s own /v1/app into words: hardware, what models run on, the loaded model', { skip }, async (t) => {
  const files = await tempDir(t, 'meshnode-model-')
  const { path } = await writeTinyGguf(join(files, 'tiny.gguf'), { seed: 7 })
  const node = await startTestNode(t, { name: 'overview-node' })
  await node.node.engine.load('tiny-chat', path)
  // The GPU is decided once llama.cpp has started (the model load above starts it)
  const app = await waitFor(async () => {
    const body = (await node.api.get('/v1/app')).body
    return body.hardware.gpu.backend != null && body.model?.status === 'loaded' ? body : false
  }, { what: 'the GPU decided and the model loaded' })
  const { page } = await openPage(t, browser)
  await visit(page, node, 'overview', 'Overview')
  await page.getByText('tiny-chat (Loaded').waitFor()

  assert.deepEqual(await unreadable(page), [])
  const { cpu, cores, memoryGB, gpu } = app.hardware
  assert.equal(await page.getByTestId('overview-hardware').textContent(), `${cpu}, ${cores} cores, ${memoryGB} GB memory`)
  // Whatever this machine runs on, the cell names the backend, each device and the reason, as words
  const runsOn = (await page.getByTestId('overview-runs-on').textContent()) ?? ''
  const backendName: Record<string, string> = { cpu: 'CPU', cuda: 'CUDA', vulkan: 'Vulkan', metal: 'Metal' }
  assert.ok(runsOn.startsWith(backendName[gpu.backend]), `${runsOn} starts with ${gpu.backend}`)
  for (const part of [...gpu.devices, ...(gpu.reason == null ? [] : [gpu.reason])]) assert.ok(runsOn.includes(part), `${runsOn} names ${part}`)
  if (gpu.detected != null) await page.getByText(gpu.detected, { exact: true }).waitFor()
  const facts = await page.getByTestId('overview').locator('dd').allTextContents()
  assert.ok(facts.every((fact) => fact.trim() !== ''), `no empty value: ${JSON.stringify(facts)}`)
})

test('a download shows a moving progress bar, then downloaded; load; the chat streams an answer, says who answered, and stops', { skip }, async (t) => {
  const files = await tempDir(t, 'meshnode-hub-files-')
  // A long context lets a greedy request run for thousands of tokens: time enough to press Stop mid-stream
  const gguf = await writeTinyGguf(join(files, 'tiny.gguf'), { seed: 7, contextLength: 4096 })
  const hub = await startFakeHub({ bytesPerSecond: Math.ceil(gguf.sizeBytes / 4) })
  t.after(() => hub.close())
  await hub.addFile('meshnode-test/tiny-GGUF', 'tiny.gguf', gguf.path)
  const node = await startTestNode(t, { hfEndpoint: hub.url, name: 'chat-node' })
  const modelID = 'hf.co/meshnode-test/tiny-GGUF/tiny.gguf'
  const { page } = await openPage(t, browser)

  await visit(page, node, 'models', 'Models')
  await page.getByLabel('Model ID', { exact: true }).fill(modelID)
  await page.getByRole('button', { name: 'Download', exact: true }).click()
  const row = page.locator(`tr[data-model-id="${modelID}"]`)
  const bar = row.getByTestId('download-progress')
  await bar.waitFor()
  // Every value the bar shows on its way, read as the page renders them
  const seen = new Set<number>()
  await waitFor(async () => {
    const status = await row.getByTestId('model-status').textContent()
    if (status === 'Downloaded') return true
    const value = await bar.evaluate((el) => (el as HTMLProgressElement).position).catch(() => null)
    if (value != null && value > 0) seen.add(value)
    if (seen.size === 2) await shot(t, page, 'models-download')
    return false
  }, { timeoutMs: 60_000, intervalMs: 100, what: 'the download to finish' })
  assert.ok(seen.size >= 2, `the bar moved: ${[...seen].join(', ')}`)
  assert.ok([...seen].every((v) => v > 0 && v <= 1))

  await row.getByRole('button', { name: 'Load tiny' }).click()
  await waitFor(async () => await row.getByTestId('model-status').textContent() === 'Loaded', { what: 'the model to load' })
  assert.equal((await node.api.get('/v1/app')).body.model.modelID, modelID)

  await visit(page, node, 'chat', 'Chat')
  await waitFor(async () => await page.getByRole('combobox', { name: 'Model' }).inputValue() === modelID, { what: 'the loaded model in the picker' })
  // Record every length the answer shows, as the DOM changes, to see it grow token by token
  await page.evaluate(() => {
    const lengths: number[] = []
    ;(window as unknown as { answerLengths: number[] }).answerLengths = lengths
    new MutationObserver(() => {
      const answer = document.querySelector('[data-testid="assistant-message"]')
      if (answer != null) lengths.push(answer.textContent?.length ?? 0)
    }).observe(document.querySelector('[data-testid="chat-messages"]') as Node, { subtree: true, childList: true, characterData: true })
  })
  await page.getByLabel('Max tokens').fill('60')
  await page.getByLabel('Message').fill('Hello there')
  await page.getByLabel('Message').press('Enter')
  await page.getByTestId('served-by').waitFor()
  await page.getByRole('button', { name: 'Send' }).waitFor({ timeout: 60_000 }) // the answer is complete
  const lengths = await page.evaluate(() => (window as unknown as { answerLengths: number[] }).answerLengths)
  assert.ok(new Set(lengths.filter((n) => n > 1)).size >= 2, `the answer grew as it streamed: ${lengths.slice(0, 20).join(', ')}`)
  assert.ok(((await page.getByTestId('assistant-message').textContent()) ?? '').length > 0)
  assert.equal(await page.getByTestId('served-by').textContent(), 'Answered by this node (chat-node)')
  assert.match(await page.getByTestId('chat-stats').textContent() ?? '', /\d+ tokens/)
  await shot(t, page, 'chat')

  // A greedy request for 4000 tokens is stopped as soon as its first words show
  await page.getByLabel('Temperature').fill('0')
  await page.getByLabel('Max tokens').fill('4000')
  await page.getByLabel('Message').fill('Tell me more')
  await page.getByRole('button', { name: 'Send' }).click()
  await waitFor(async () => ((await page.getByTestId('assistant-message').last().textContent()) ?? '').length > 1, { what: 'the first words' })
  await page.getByRole('button', { name: 'Stop' }).click()
  await waitFor(async () => /stopped/.test(await page.getByTestId('chat-stats').textContent() ?? ''), { what: 'the stopped mark' })
  const stopped = ((await page.getByTestId('assistant-message').last().textContent()) ?? '').length
  assert.ok(stopped > 0)
  assert.equal(await page.getByRole('button', { name: 'Send' }).count(), 1)
})

test('a GGUF file on the node\'s disk is imported from the Models page; a bad path shows the node\'s message at the field', { skip }, async (t) => {
  const dir = await tempDir(t, 'meshnode-import-')
  const gguf = await writeTinyGguf(join(dir, 'My Tiny.gguf'), { seed: 3 })
  const node = await startTestNode(t)
  const { page } = await openPage(t, browser)
  await visit(page, node, 'models', 'Models')

  await page.getByLabel('Path of the GGUF file on the node').fill('relative/model.gguf')
  await page.getByRole('button', { name: 'Import' }).click()
  const expected = (await node.api.post('/v1/app/models/import', { path: 'relative/model.gguf' })).body.error
  assert.equal(expected.param, 'path')
  await page.getByText(expected.message).waitFor()
  assert.equal(await page.getByLabel('Path of the GGUF file on the node').getAttribute('aria-invalid'), 'true')

  await page.getByLabel('Path of the GGUF file on the node').fill(gguf.path)
  await page.getByRole('button', { name: 'Import' }).click()
  await page.getByText('Imported as my-tiny').waitFor()
  const row = page.locator('tr[data-model-id="my-tiny"]')
  await waitFor(async () => await row.getByTestId('model-status').textContent() === 'Downloaded', { what: 'the imported model listed' })
  await row.getByRole('button', { name: /^Load / }).click()
  await waitFor(async () => await row.getByTestId('model-status').textContent() === 'Loaded', { what: 'the imported model to load' })
  assert.equal((await node.api.get('/v1/app')).body.model.modelID, 'my-tiny')

  // A second model loads beside it; each row says what its model does; unloading one leaves the other loaded
  const other = await writeTinyGguf(join(dir, 'other.gguf'), { seed: 4 })
  assert.equal((await node.api.post('/v1/app/models/import', { path: other.path, modelID: 'other' })).status, 200)
  assert.equal((await node.api.post('/v1/app/models/load', { modelID: 'other' })).status, 200)
  await page.reload()
  const otherRow = page.locator('tr[data-model-id="other"]')
  await waitFor(async () => await otherRow.getByTestId('model-status').textContent() === 'Loaded', { what: 'the second model listed as loaded' })
  for (const loadedRow of [row, otherRow]) assert.match((await loadedRow.getByTestId('model-loaded').textContent()) ?? '', /^0\/2 slots busy, 0 queued · [\d.]+ [kMG]B\s*stays until unloaded$/)
  await otherRow.getByRole('button', { name: 'Unload other' }).click()
  await waitFor(async () => await otherRow.getByTestId('model-status').textContent() === 'Downloaded', { what: 'the second model to unload' })
  assert.equal(await row.getByTestId('model-status').textContent(), 'Loaded', 'the first stays loaded')
  assert.deepEqual(node.node.engine.loadedModels().map((model) => model.modelID), ['my-tiny'])
})

test('the storage figure counts what max_storage_gb counts: downloaded models, not imported files, which are named apart', { skip }, async (t) => {
  const files = await tempDir(t, 'meshnode-hub-files-')
  const downloaded = await writeTinyGguf(join(files, 'tiny.gguf'), { seed: 7 })
  const imported = await writeTinyGguf(join(files, 'mine.gguf'), { seed: 3 })
  const hub = await startFakeHub()
  t.after(() => hub.close())
  await hub.addFile('meshnode-test/tiny-GGUF', 'tiny.gguf', downloaded.path)
  const node = await startTestNode(t, { hfEndpoint: hub.url })
  const modelID = 'hf.co/meshnode-test/tiny-GGUF/tiny.gguf'
  assert.equal((await node.api.post('/v1/app/models/download', { modelID })).status, 200)
  await waitFor(async () => (await node.api.get('/v1/app/models')).body.models.some((m: { modelID: string, status: string }) => m.modelID === modelID && m.status === 'downloaded'),
    { what: 'the download to finish' })
  assert.equal((await node.api.post('/v1/app/models/import', { path: imported.path })).status, 200)
  const records = (await node.api.get('/v1/app/models')).body.models as Array<{ modelID: string, source: string, sizeBytes: number }>
  assert.equal(records.find((m) => m.source.startsWith('file:'))?.sizeBytes, imported.sizeBytes)

  const { page } = await openPage(t, browser)
  await visit(page, node, 'models', 'Models')
  await page.locator('tr[data-model-id="mine"]').waitFor()
  assert.equal(await page.getByTestId('storage-used').textContent(), `${formatBytes(downloaded.sizeBytes)} of ${formatBytes(50e9)} used by downloaded models`)
  assert.equal(await page.getByRole('meter').evaluate((el) => (el as HTMLMeterElement).value), downloaded.sizeBytes)
  assert.equal(await page.getByTestId('storage-imported').textContent(),
    `Imported files (${formatBytes(imported.sizeBytes)}) stay where they are and do not count against this limit.`)
})

test('a new API key is shown once, then only masked; nothing lands in the page\'s storage', { skip }, async (t) => {
  const node = await startTestNode(t)
  const { page } = await openPage(t, browser)
  await visit(page, node, 'keys', 'API keys')
  await page.getByLabel('Name').fill('laptop')
  await page.getByRole('button', { name: 'Generate' }).click()
  const key = (await page.getByTestId('new-key-value').textContent()) ?? ''
  assert.match(key, /^mn_[A-Za-z0-9_-]{43}$/)
  assert.equal((await node.api.get('/v1/app/session', { authorization: `Bearer ${key}` })).status, 200)
  assert.equal((await node.api.get('/v1/app/apikeys')).body.keys[0].scope, 'inference', 'the form\'s default scope')
  await page.getByRole('button', { name: 'Copy key' }).click()
  await page.getByRole('button', { name: 'Copied' }).waitFor()
  assert.equal(await page.evaluate(async () => await navigator.clipboard.readText()), key)
  const row = page.locator('tr', { hasText: 'laptop' })
  const masked = (await row.getByTestId('key-prefix').textContent()) ?? ''
  assert.equal(masked, `${key.slice(0, 12)}...${key.slice(-4)}`)

  await page.getByRole('button', { name: 'Done, hide it' }).click()
  await page.getByTestId('new-key').waitFor({ state: 'detached' })
  assert.ok(!(await page.content()).includes(key), 'gone from the page')
  await page.reload()
  await page.getByTestId('keys-table').waitFor()
  assert.ok(!(await page.content()).includes(key), 'and not shown again')
  assert.equal(await page.locator('tr', { hasText: 'laptop' }).getByTestId('key-prefix').textContent(), masked)
  assert.deepEqual(await page.evaluate(() => [localStorage.length, sessionStorage.length]), [0, 0])

  await page.locator('tr', { hasText: 'laptop' }).getByRole('button', { name: 'Revoke laptop' }).click()
  await page.getByRole('dialog').getByRole('button', { name: 'Revoke' }).click()
  await waitFor(async () => await page.locator('tr', { hasText: 'laptop' }).getByRole('cell', { name: 'Revoked' }).count() === 1, { what: 'the key revoked' })
  assert.equal((await node.api.get('/v1/app/apikeys')).body.keys[0].status, 'revoked')
})

test('a key\'s scope is chosen when it is made, inference first, each explained; the list shows it, as the node records it', { skip }, async (t) => {
  const node = await startTestNode(t)
  const { page } = await openPage(t, browser)
  await visit(page, node, 'keys', 'API keys')
  const scopes = page.getByRole('group', { name: 'Scope' })
  assert.deepEqual(await scopes.getByRole('radio').evaluateAll((radios) => radios.map((r) => (r as HTMLInputElement).value)), ['inference', 'admin'])
  assert.equal(await scopes.getByRole('radio', { name: 'Inference' }).isChecked(), true)
  assert.equal(await scopes.getByRole('radio', { name: 'Admin' }).isChecked(), false)
  // Each choice carries its one-line explanation as its description, for screen readers too
  assert.match(await scopes.getByRole('radio', { name: 'Inference' }).evaluate((r) => document.getElementById(r.getAttribute('aria-describedby') ?? '')?.textContent ?? ''), /OpenAI-compatible API only/)
  assert.match(await scopes.getByRole('radio', { name: 'Admin' }).evaluate((r) => document.getElementById(r.getAttribute('aria-describedby') ?? '')?.textContent ?? ''), /Full control/)

  const made: Record<string, string> = {}
  for (const [name, scope, label] of [['chat-app', 'inference', 'Inference'], ['ops', 'admin', 'Admin']]) {
    await page.getByLabel('Name').fill(name)
    await scopes.getByRole('radio', { name: label }).check()
    await page.getByRole('button', { name: 'Generate' }).click()
    await page.getByTestId('new-key').getByText(`The key "${name}"`).waitFor()
    made[name] = scope
    await waitFor(async () => await page.locator('tr', { hasText: name }).getByTestId('key-scope').textContent() === label, { what: `${name} listed as ${label}` })
    // The form offers inference again for the next key
    assert.equal(await scopes.getByRole('radio', { name: 'Inference' }).isChecked(), true)
  }
  const listed = (await node.api.get('/v1/app/apikeys')).body.keys as Array<{ name: string, scope: string }>
  assert.deepEqual(Object.fromEntries(listed.map((k) => [k.name, k.scope])), made)
  await page.reload()
  await page.getByTestId('keys-table').waitFor()
  assert.deepEqual(await page.getByTestId('key-scope').allTextContents(), listed.map((k) => k.scope === 'admin' ? 'Admin' : 'Inference'))
  await shot(t, page, 'keys')
})

test('switching language to zh changes the visible text; a bad setting shows the API\'s own message at its field', { skip }, async (t) => {
  const node = await startTestNode(t)
  const { page } = await openPage(t, browser)
  await visit(page, node, 'settings', 'Settings')
  assert.equal(await page.getByRole('link', { name: 'Overview' }).count(), 1)
  await backtickFree(page, 'Inference backend')
  await page.getByLabel('Language').selectOption('zh')
  await page.getByRole('button', { name: 'Save' }).click()
  await page.getByRole('heading', { level: 1, name: '设置' }).waitFor()
  await backtickFree(page, '推理后端')
  assert.equal(await page.getByRole('link', { name: '概览' }).count(), 1)
  assert.equal(await page.getByRole('link', { name: 'Overview' }).count(), 0)
  assert.equal(await page.evaluate(() => document.documentElement.lang), 'zh')
  assert.equal((await node.api.get('/v1/app')).body.settings.language, 'zh')
  await shot(t, page, 'settings-zh')

  // The node's validation message, word for word, at the field it names
  const expected = (await node.api.patch('/v1/app/settings', { max_storage_gb: -5 })).body.error
  assert.equal(expected.param, 'max_storage_gb')
  await page.getByLabel('模型存储上限（GB）').fill('-5')
  await page.getByRole('button', { name: '保存' }).click()
  await page.getByText(expected.message).waitFor()
  assert.equal(await page.getByLabel('模型存储上限（GB）').getAttribute('aria-invalid'), 'true')
  assert.equal((await node.api.get('/v1/app')).body.settings.max_storage_gb, 50, 'nothing changed')

  // Another language the node accepts falls back to English for what it lacks
  assert.equal((await node.api.patch('/v1/app/settings', { language: 'fr' })).status, 200)
  await page.reload()
  await page.getByRole('heading', { level: 1, name: 'Settings' }).waitFor()
  // The English heading shows before the node's settings arrive too (the page's default language); the page's lang
  // follows once they have: wait for it rather than read it at once.
  await page.waitForFunction(() => document.documentElement.lang !== 'en', undefined, { timeout: 60_000 })
  assert.equal(await page.evaluate(() => document.documentElement.lang), 'fr')
})

test('with network access on, the page asks for a key; `meshnode dashboard`\'s link signs in once and leaves no secret behind', { skip }, async (t) => {
  const node = await startTestNode(t)
  const key = (await node.api.post('/v1/app/apikeys', { name: 'remote' })).body.key as string
  assert.equal((await node.api.patch('/v1/app/settings', { allow_network_access: true })).status, 200)
  const { page, context } = await openPage(t, browser)

  await page.goto(node.node.url)
  await page.getByRole('heading', { name: 'Sign in to meshnode' }).waitFor()
  assert.deepEqual(await seriousA11yViolations(page), [])
  assert.ok(!(await page.locator('body').innerText()).includes('`'), 'no literal backtick')
  await page.locator('main p code', { hasText: 'meshnode dashboard' }).waitFor()
  await page.getByLabel('API key').fill('mn_wrong')
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('alert').getByText('Invalid or revoked API key').waitFor()
  await page.getByLabel('API key').fill(key)
  await page.getByRole('button', { name: 'Sign in' }).click()
  await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor()
  const cookies = await context.cookies()
  assert.equal(cookies.length, 1)
  assert.equal(cookies[0].httpOnly, true)
  assert.equal(cookies[0].sameSite, 'Strict')
  assert.equal(await page.evaluate(() => document.cookie), '', 'the page\'s scripts cannot read the session')
  assert.deepEqual(await page.evaluate(() => [localStorage.length, sessionStorage.length]), [0, 0])
  assert.ok(!page.url().includes(key))

  // A state change through the cookie: the page's own fetch passes the CSRF rule
  await visit(page, node, 'keys', 'API keys')
  await page.getByLabel('Name').fill('made-in-browser')
  await page.getByRole('button', { name: 'Generate' }).click()
  await page.getByTestId('new-key').waitFor()
  await page.getByRole('button', { name: 'Sign out' }).click()
  await page.getByRole('heading', { name: 'Sign in to meshnode' }).waitFor()

  const cli = await runCli(['dashboard', '--no-open', '--url', node.node.url, '--data-dir', node.dataDir])
  assert.equal(cli.code, 0, cli.stderr)
  const link = /http:\/\/\S+\/sign-in\?token=\S+/.exec(cli.stdout)?.[0] ?? ''
  const token = new URL(link).searchParams.get('token') ?? ''
  await page.goto(link)
  await page.getByRole('heading', { level: 1, name: 'Overview' }).waitFor()
  assert.ok(!page.url().includes(token), `no token in ${page.url()}`)
  assert.ok(!(await page.content()).includes(token))
  assert.deepEqual(await page.evaluate(() => [localStorage.length, sessionStorage.length, document.cookie]), [0, 0, ''])

  const other = await openPage(t, browser)
  await other.page.goto(link)
  await other.page.getByText('That sign-in link was already used or has expired').waitFor()
})

test('two nodes: sending credits from one dashboard changes both balances, live', { skip }, async (t) => {
  const relay = await startTestRelay(t)
  const [a, b] = await Promise.all([startWanNode(t, relay, { name: 'alice' }), startWanNode(t, relay, { name: 'bob' })])
  await Promise.all([waitForPeers(a, [b.nodeID]), waitForPeers(b, [a.nodeID])])
  const alice = await openPage(t, browser)
  const bob = await openPage(t, browser)
  await visit(alice.page, a, 'wallet', 'Wallet')
  await visit(bob.page, b, 'wallet', 'Wallet')
  await waitFor(async () => await bob.page.getByTestId('wallet-balance').textContent() === '100', { what: 'bob\'s balance' })

  await alice.page.getByLabel('Peer', { exact: true }).fill(b.nodeID)
  await alice.page.getByLabel('Amount (credits)').fill('2.5')
  await alice.page.getByLabel('Memo').fill('thanks for the tokens')
  await alice.page.getByRole('button', { name: 'Send…' }).click()
  const dialog = alice.page.getByRole('dialog')
  await dialog.getByText('Send 2.5 credits to bob?').waitFor()
  await dialog.getByRole('button', { name: 'Send', exact: true }).click()
  await alice.page.getByTestId('send-result').waitFor()

  await waitFor(async () => await alice.page.getByTestId('wallet-balance').textContent() === '97.5', { what: 'alice\'s balance to fall' })
  // Bob's page was not touched: the event stream brings the credit
  await waitFor(async () => await bob.page.getByTestId('wallet-balance').textContent() === '102.5', { what: 'bob\'s balance to rise' })
  await bob.page.getByRole('cell', { name: 'thanks for the tokens' }).waitFor()
  assert.equal((await b.api.get('/v1/app/wallet')).body.currentBalance, 102.5)
  await shot(t, alice.page, 'wallet')

  // The peers page lists the other node, with its link type
  await visit(alice.page, a, 'peers', 'Peers')
  await alice.page.locator(`tr[data-node-id="${b.nodeID}"]`).getByText('bob').waitFor()
  assert.equal(await alice.page.locator(`tr[data-node-id="${b.nodeID}"] td`).first().textContent(), 'WAN')

  // A private network made in one dashboard and joined from the other with the invite code it shows
  await visit(alice.page, a, 'ptn', 'Private networks')
  await alice.page.getByLabel('Name').fill('crew')
  await alice.page.getByRole('button', { name: 'Create', exact: true }).click()
  await alice.page.getByRole('button', { name: 'Manage crew' }).click()
  await alice.page.getByRole('button', { name: 'Create invite code' }).click()
  const code = (await alice.page.getByTestId('invite-code').textContent()) ?? ''
  assert.ok(code.length > 20)
  await alice.page.getByRole('button', { name: 'Copy invite code' }).click()
  assert.equal(await alice.page.evaluate(async () => await navigator.clipboard.readText()), code)
  await visit(bob.page, b, 'ptn', 'Private networks')
  await bob.page.getByLabel('Invite code').fill(code)
  await bob.page.getByRole('button', { name: 'Join with invite' }).click()
  await bob.page.getByText('Joined crew as provider.').waitFor()
  await bob.page.getByRole('row', { name: /crew/ }).getByRole('cell', { name: 'active' }).waitFor()
  assert.equal((await b.api.get('/v1/app/ptn')).body.memberships[0].name, 'crew')

  // Leaving asks first; the node's answer is what the page shows
  await bob.page.getByRole('button', { name: 'Manage crew' }).click()
  await bob.page.getByRole('button', { name: 'Leave', exact: true }).click()
  await bob.page.getByRole('dialog').getByRole('button', { name: 'Leave' }).click()
  await bob.page.getByText('Left the network.').waitFor()
  assert.equal((await b.api.get('/v1/app/ptn')).body.memberships[0].status, 'left')

  // Bob loads a model: Alice's chat picker offers it as bob's, and the answer says bob served it
  const files = await tempDir(t, 'meshnode-model-')
  const { path } = await writeTinyGguf(join(files, 'tiny.gguf'), { seed: 7 })
  await b.node.engine.load('tiny-chat', path)
  await visit(alice.page, a, 'chat', 'Chat')
  const option = alice.page.getByRole('option', { name: 'tiny-chat — peer bob' })
  await waitFor(async () => await option.count() === 1, { what: 'bob\'s model in alice\'s picker' })
  await alice.page.getByRole('combobox', { name: 'Model' }).selectOption({ label: 'tiny-chat — peer bob' })
  await alice.page.getByLabel('Max tokens').fill('20')
  await alice.page.getByLabel('Message').fill('Hi bob')
  await alice.page.getByRole('button', { name: 'Send' }).click()
  await alice.page.getByTestId('served-by').waitFor()
  assert.equal(await alice.page.getByTestId('served-by').textContent(), 'Answered by peer bob')
})
