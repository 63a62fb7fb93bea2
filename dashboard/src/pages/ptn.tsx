// Private trusted networks: memberships; create, join (invite code or certificate); and for one PTN: invite, issue a
// certificate, promote, leave, recover, import its CA key.
import type { JSX } from 'preact'
import { useCallback, useEffect, useState } from 'preact/hooks'
import type { CertificateResult, Invite, Membership, MembershipList } from '../../../src/http/schemas/ptn.ts'
import { ApiError, get, post } from '../api.ts'
import type { PageProps } from '../page.ts'
import { ConfirmDialog, Copyable, DataTable, ErrorText, Field, Section, fieldError, useAction } from '../components.tsx'
import { shortID } from '../format.ts'
import { useT } from '../i18n.ts'

export function PtnPage ({ refresh }: PageProps): JSX.Element {
  const t = useT()
  const [memberships, setMemberships] = useState<Membership[]>([])
  const [selected, setSelected] = useState<string | null>(null)
  const [error, setError] = useState<unknown>(null)
  const reload = useCallback(() => {
    get<MembershipList>('/v1/app/ptn').then((list) => { setMemberships(list.memberships); setError(null) }, setError)
  }, [])
  useEffect(reload, [reload])
  const changed = (): void => { reload(); refresh() }
  const current = memberships.find((m) => m.ptnID === selected) ?? null

  return (
    <>
      <Section title={t('ptn.memberships')}>
        <ErrorText error={error} />
        {memberships.length === 0
          ? <p>{t('ptn.none')}</p>
          : (
            <DataTable testID='ptn-table' columns={[t('ptn.name'), t('ptn.id'), t('ptn.role'), t('ptn.members'), t('ptn.status'), t('common.actions')]}>
              {memberships.map((m) => (
                <tr key={m.ptnID}>
                  <th scope='row'>{m.name}</th>
                  <td><Copyable value={m.ptnID} label={t('ptn.copyID')} /></td>
                  <td>{m.role}</td>
                  <td>{m.members}</td>
                  <td>{m.status}</td>
                  <td>
                    <button type='button' class='small secondary' aria-pressed={selected === m.ptnID}
                      aria-label={t('ptn.manageNamed', { name: m.name })} onClick={() => { setSelected(m.ptnID) }}>{t('ptn.manage')}</button>
                  </td>
                </tr>
              ))}
            </DataTable>
            )}
      </Section>
      {current != null && <ManagePtn key={current.ptnID} membership={current} onChanged={changed} />}
      <CreatePtn onCreated={changed} />
      <JoinPtn onJoined={changed} />
    </>
  )
}

function ManagePtn ({ membership, onChanged }: { membership: Membership, onChanged: () => void }): JSX.Element {
  const t = useT()
  const ptnID = membership.ptnID
  const [invite, setInvite] = useState<string | null>(null)
  const [cert, setCert] = useState<CertificateResult | null>(null)
  const [certNode, setCertNode] = useState('')
  const [certRole, setCertRole] = useState('provider')
  const [promoteNode, setPromoteNode] = useState('')
  const [caKey, setCaKey] = useState('')
  const [leaving, setLeaving] = useState<false | 'ask' | 'force'>(false)
  const [done, setDone] = useState<string | null>(null)
  const action = useAction()
  const run = (work: () => Promise<void>): void => {
    setDone(null)
    void action.run(work)
  }

  const leave = (force: boolean): void => {
    setLeaving(false)
    run(async () => {
      try {
        await post('/v1/app/ptn/leave', { ptnID, force })
      } catch (err) {
        // The last holder of the CA key must confirm again (docs/API.md, leave): ask, naming the consequence; the
        // node's message stays on the page too.
        if (!force && err instanceof ApiError && err.status === 409) setLeaving('force')
        throw err
      }
      setDone(t('ptn.left'))
      onChanged()
    })
  }

  return (
    <Section title={t('ptn.manageTitle', { name: membership.name })}>
      <ErrorText error={action.error} />
      {done != null && <p role='status'>{done}</p>}
      <div class='grid'>
        <div>
          <h3>{t('ptn.invite')}</h3>
          <p class='muted'>{t('ptn.inviteIntro')}</p>
          <button type='button' disabled={action.busy} onClick={() => {
            run(async () => { setInvite((await post<Invite>('/v1/app/ptn/invite', { ptnID })).inviteCode) })
          }}>{t('ptn.createInvite')}</button>
          {invite != null && <p><Copyable value={invite} label={t('ptn.copyInvite')} testID='invite-code' /></p>}
        </div>
        <form onSubmit={(event) => {
          event.preventDefault()
          run(async () => { setCert(await post<CertificateResult>('/v1/app/ptn/issue-cert', { ptnID, nodeID: certNode.trim(), role: certRole })) })
        }}>
          <h3>{t('ptn.issueCert')}</h3>
          <Field label={t('ptn.nodeID')} error={fieldError(action.error, 'nodeID')}>
            {({ id, describedBy, invalid }) => <input id={id} required value={certNode} spellcheck={false} aria-describedby={describedBy} aria-invalid={invalid} onInput={(e) => { setCertNode(e.currentTarget.value) }} />}
          </Field>
          <Field label={t('ptn.role')}>
            {({ id }) => (
              <select id={id} value={certRole} onChange={(e) => { setCertRole(e.currentTarget.value) }}>
                <option value='provider'>provider</option>
                <option value='consumer'>consumer</option>
                <option value='admin'>admin</option>
              </select>
            )}
          </Field>
          <button type='submit' disabled={action.busy}>{t('ptn.issue')}</button>
          {cert != null && <p>{t('ptn.certFor', { node: shortID(cert.nodeID), role: cert.role })} <Copyable value={cert.certData} label={t('ptn.copyCert')} /></p>}
        </form>
        <form onSubmit={(event) => {
          event.preventDefault()
          run(async () => {
            await post('/v1/app/ptn/promote-admin', { ptnID, nodeID: promoteNode.trim() })
            setDone(t('ptn.promoted', { node: shortID(promoteNode.trim()) }))
            setPromoteNode('')
            onChanged()
          })
        }}>
          <h3>{t('ptn.promote')}</h3>
          <Field label={t('ptn.nodeID')}>
            {({ id }) => <input id={id} required value={promoteNode} spellcheck={false} onInput={(e) => { setPromoteNode(e.currentTarget.value) }} />}
          </Field>
          <button type='submit' disabled={action.busy}>{t('ptn.promoteButton')}</button>
        </form>
        <form onSubmit={(event) => {
          event.preventDefault()
          run(async () => {
            await post('/v1/app/ptn/import-ca-key', { ptnID, caKeyHex: caKey.trim() })
            setCaKey('')
            setDone(t('ptn.imported'))
            onChanged()
          })
        }}>
          <h3>{t('ptn.importCa')}</h3>
          <Field label={t('ptn.caKey')} error={fieldError(action.error, 'caKeyHex')}>
            {({ id, describedBy, invalid }) => <input id={id} required type='password' autocomplete='off' value={caKey} aria-describedby={describedBy} aria-invalid={invalid} onInput={(e) => { setCaKey(e.currentTarget.value) }} />}
          </Field>
          <button type='submit' disabled={action.busy}>{t('ptn.importButton')}</button>
        </form>
        <div>
          <h3>{t('ptn.membership')}</h3>
          <div class='actions'>
            <button type='button' class='secondary' disabled={action.busy} onClick={() => {
              run(async () => { await post('/v1/app/ptn/recover', { ptnID }); setDone(t('ptn.recovered')); onChanged() })
            }}>{t('ptn.recover')}</button>
            <button type='button' class='danger' disabled={action.busy} onClick={() => { setLeaving('ask') }}>{t('ptn.leave')}</button>
          </div>
        </div>
      </div>
      {leaving !== false && (
        <ConfirmDialog title={t('ptn.leaveTitle', { name: membership.name })} danger confirmLabel={t('ptn.leave')}
          onCancel={() => { setLeaving(false) }} onConfirm={() => { leave(leaving === 'force') }}>
          <p>{leaving === 'force' ? t('ptn.leaveForce') : t('ptn.leaveBody')}</p>
        </ConfirmDialog>
      )}
    </Section>
  )
}

function CreatePtn ({ onCreated }: { onCreated: () => void }): JSX.Element {
  const t = useT()
  const [name, setName] = useState('')
  const action = useAction()
  return (
    <Section title={t('ptn.create')}>
      <form class='inline-form' onSubmit={(event) => {
        event.preventDefault()
        void action.run(async () => { await post('/v1/app/ptn/create', { name: name.trim() }); setName(''); onCreated() })
      }}>
        <Field label={t('ptn.name')} error={fieldError(action.error, 'name')}>
          {({ id, describedBy, invalid }) => <input id={id} required maxLength={128} value={name} aria-describedby={describedBy} aria-invalid={invalid} onInput={(e) => { setName(e.currentTarget.value) }} />}
        </Field>
        <button type='submit' disabled={action.busy}>{t('ptn.createButton')}</button>
      </form>
      {fieldError(action.error, 'name') == null && <ErrorText error={action.error} />}
    </Section>
  )
}

function JoinPtn ({ onJoined }: { onJoined: () => void }): JSX.Element {
  const t = useT()
  const [code, setCode] = useState('')
  const [cert, setCert] = useState('')
  const [joined, setJoined] = useState<string | null>(null)
  const action = useAction()
  const join = (path: string, body: unknown, clear: () => void): void => {
    setJoined(null)
    void action.run(async () => {
      const result = await post<{ name: string, role: string }>(path, body)
      clear()
      setJoined(t('ptn.joined', { name: result.name, role: result.role }))
      onJoined()
    })
  }
  return (
    <Section title={t('ptn.join')}>
      <ErrorText error={action.error} />
      {joined != null && <p role='status'>{joined}</p>}
      <div class='grid'>
        <form onSubmit={(event) => { event.preventDefault(); join('/v1/app/ptn/join', { inviteCode: code.trim() }, () => { setCode('') }) }}>
          <Field label={t('ptn.inviteCode')}>
            {({ id }) => <input id={id} required value={code} spellcheck={false} onInput={(e) => { setCode(e.currentTarget.value) }} />}
          </Field>
          <button type='submit' disabled={action.busy}>{t('ptn.joinInvite')}</button>
        </form>
        <form onSubmit={(event) => { event.preventDefault(); join('/v1/app/ptn/join-with-cert', { certData: cert.trim() }, () => { setCert('') }) }}>
          <Field label={t('ptn.certificate')}>
            {({ id }) => <textarea id={id} required rows={2} value={cert} spellcheck={false} onInput={(e) => { setCert(e.currentTarget.value) }} />}
          </Field>
          <button type='submit' disabled={action.busy}>{t('ptn.joinCert')}</button>
        </form>
      </div>
    </Section>
  )
}
