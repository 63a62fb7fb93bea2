// Small parts every page uses: copy, confirm, errors, labelled fields. Native elements only (button, dialog, input),
// so the keyboard and screen readers work without extra wiring.
import type { ComponentChildren, JSX } from 'preact'
import { useEffect, useId, useRef, useState } from 'preact/hooks'
import { ApiError } from './api.ts'
import { useT } from './i18n.ts'

/** Copies `text`; where the Clipboard API is missing (a plain-HTTP page from another host), selects a hidden field. */
export function CopyButton ({ text, label }: { text: string, label?: string }): JSX.Element {
  const t = useT()
  const [copied, setCopied] = useState(false)
  useEffect(() => {
    if (!copied) return
    const timer = setTimeout(() => { setCopied(false) }, 2000)
    return () => { clearTimeout(timer) }
  }, [copied])
  const copy = async (): Promise<void> => {
    if (navigator.clipboard != null) {
      await navigator.clipboard.writeText(text)
    } else {
      const field = document.createElement('textarea')
      field.value = text
      field.setAttribute('readonly', '')
      field.className = 'offscreen'
      document.body.append(field)
      field.select()
      document.execCommand('copy') // the only way to the clipboard outside a secure context
      field.remove()
    }
    setCopied(true)
  }
  // The visible text is the whole name (no aria-label), so speech input users can say what they see
  return (
    <button type='button' class='secondary small' onClick={() => { copy().catch(() => { setCopied(false) }) }}>
      {copied ? t('common.copied') : (label ?? t('common.copy'))}
    </button>
  )
}

/** A value in a monospace box with its copy button. */
export function Copyable ({ value, label, testID }: { value: string, label: string, testID?: string }): JSX.Element {
  return (
    <span class='copyable'>
      <code data-testid={testID} title={value}>{value}</code>
      <CopyButton text={value} label={label} />
    </span>
  )
}

/** A modal confirmation: focus goes into the dialog, Escape cancels, and focus returns to where it was. */
export function ConfirmDialog ({ title, children, confirmLabel, danger, onConfirm, onCancel }: {
  title: string
  children: ComponentChildren
  confirmLabel: string
  danger?: boolean
  onConfirm: () => void
  onCancel: () => void
}): JSX.Element {
  const t = useT()
  const ref = useRef<HTMLDialogElement>(null)
  const titleID = useId()
  useEffect(() => {
    const dialog = ref.current
    if (dialog == null) return
    const before = document.activeElement as HTMLElement | null
    dialog.showModal()
    return () => { before?.focus() }
  }, [])
  return (
    <dialog ref={ref} aria-labelledby={titleID} onCancel={(event) => { event.preventDefault(); onCancel() }}>
      <h2 id={titleID}>{title}</h2>
      <div class='dialog-body'>{children}</div>
      <div class='actions'>
        <button type='button' class='secondary' onClick={onCancel}>{t('common.cancel')}</button>
        <button type='button' class={danger === true ? 'danger' : ''} onClick={onConfirm}>{confirmLabel}</button>
      </div>
    </dialog>
  )
}

/** An error from the node (or anything else), announced to screen readers. */
export function ErrorText ({ error }: { error: unknown }): JSX.Element | null {
  if (error == null) return null
  const message = error instanceof Error ? error.message : String(error)
  return <p class='error' role='alert'>{message}</p>
}

/** The message for `field` when the node's 400 named it (`param`), else null. */
export function fieldError (error: unknown, field: string): string | null {
  return error instanceof ApiError && error.param === field ? error.message : null
}

/**
 * A message that may name something to type (a command, a setting's value) between backticks: those parts are shown
 * as code, never as literal backticks. Messages keep the markup so both languages mark the same words.
 */
export function RichText ({ text }: { text: string }): JSX.Element {
  const parts = text.split('`')
  // An odd number of backticks leaves the last one unpaired: it is shown as it is rather than opening code forever
  const paired = parts.length % 2 === 1 ? parts : [...parts.slice(0, -2), `${parts[parts.length - 2]}\`${parts[parts.length - 1]}`]
  return <>{paired.map((part, i) => i % 2 === 1 ? <code key={i}>{part}</code> : part)}</>
}

/** A labelled input with its hint and its error from the node, tied together for assistive technology. */
export function Field ({ label, hint, error, children }: {
  label: string
  hint?: string
  error?: string | null
  children: (ids: { id: string, describedBy: string | undefined, invalid: boolean }) => ComponentChildren
}): JSX.Element {
  const id = useId()
  const hintID = `${id}-hint`
  const errorID = `${id}-error`
  const describedBy = [hint != null ? hintID : null, error != null ? errorID : null].filter((x) => x != null).join(' ')
  return (
    <div class={`field${error != null ? ' invalid' : ''}`}>
      <label for={id}>{label}</label>
      {children({ id, describedBy: describedBy === '' ? undefined : describedBy, invalid: error != null })}
      {hint != null && <small id={hintID} class='hint'><RichText text={hint} /></small>}
      {error != null && <small id={errorID} class='field-error'>{error}</small>}
    </div>
  )
}

/** Runs an action, tracking whether it is busy and what it failed with. */
export function useAction (): { busy: boolean, error: unknown, run: (action: () => Promise<void>) => Promise<void>, clear: () => void } {
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<unknown>(null)
  const run = async (action: () => Promise<void>): Promise<void> => {
    setBusy(true)
    setError(null)
    try {
      await action()
    } catch (err) {
      setError(err)
    } finally {
      setBusy(false)
    }
  }
  return { busy, error, run, clear: () => { setError(null) } }
}

/** A card with a heading, for the sections of a page. */
export function Section ({ title, children, actions }: { title: string, children: ComponentChildren, actions?: ComponentChildren }): JSX.Element {
  const id = useId()
  return (
    <section class='card' aria-labelledby={id}>
      <div class='card-head'>
        <h2 id={id}>{title}</h2>
        {actions}
      </div>
      {children}
    </section>
  )
}

/** A table with its scrolling wrapper and a header row of column names; rows come as children. */
export function DataTable ({ testID, columns, children }: { testID: string, columns: string[], children: ComponentChildren }): JSX.Element {
  return (
    <div class='table-wrap'>
      <table data-testid={testID}>
        <thead>
          <tr>{columns.map((column) => <th key={column} scope='col'>{column}</th>)}</tr>
        </thead>
        <tbody>{children}</tbody>
      </table>
    </div>
  )
}

