// A read-only page of the Tekton Dashboard's own components
// (@tektoncd/dashboard-components and -utils, from the npm registry) for
// opr8r's e2e cluster and `make dev`. The Tekton Dashboard application
// cannot be built here: the Go module proxy refuses its module and npm
// holds only these libraries (docs/dashboards.md). The routes, query
// parameters and the way TaskRuns become the task tree are the dashboard's
// (paths, urls, getTaskRunsWithPlaceholders from dashboard-utils), so a
// PipelineRun looks here as it looks there; the glue around them is ours.
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { IntlProvider, useIntl } from 'react-intl';
import {
  HashRouter,
  Link as RouterLink,
  Navigate,
  Route,
  Routes,
  useLocation,
  useNavigate,
  useParams
} from 'react-router-dom';
import {
  Content,
  Header,
  HeaderName,
  InlineNotification,
  SideNav,
  SideNavItems,
  SideNavLink
} from '@carbon/react';
import {
  FormattedDate,
  FormattedDuration,
  LabelFilter,
  Link,
  Param,
  PipelineRun,
  PipelineRuns,
  ResourceDetails,
  StatusIcon,
  Table
} from '@tektoncd/dashboard-components';
import {
  getAddFilterHandler,
  getClearFiltersHandler,
  getDeleteFilterHandler,
  getFilters,
  getStatus,
  getTaskRunsWithPlaceholders,
  paths,
  queryParams as queryParamConstants,
  urls,
  useTitleSync
} from '@tektoncd/dashboard-utils';

import { byNewest, fetchLogs, tekton, tektonBeta, usePoll } from './api';
import './App.scss';

const { PIPELINE_TASK, RETRY, STEP, TASK_RUN_NAME, VIEW } = queryParamConstants;

function Notice() {
  return (
    <p className="opr8r--notice">
      The Tekton Dashboard&apos;s own components (@tektoncd/dashboard-components
      0.68.0-alpha.1), read-only, in opr8r&apos;s e2e cluster.
    </p>
  );
}

function LoadError({ error }) {
  if (!error) return null;
  return <InlineNotification kind="error" lowContrast hideCloseButton title="Error loading" subtitle={error.message} />;
}

function duration(run) {
  if (!run?.status?.startTime) return undefined;
  const { status } = getStatus(run);
  const start = new Date(run.status.startTime).getTime();
  const end =
    (status === 'True' || status === 'False') && run.status.completionTime
      ? new Date(run.status.completionTime).getTime()
      : Date.now();
  return end - start;
}

// Filters is the label filter of a list page, kept in the URL's
// labelSelector as the dashboard keeps it.
function Filters({ filters }) {
  const location = useLocation();
  const navigate = useNavigate();
  return (
    <LabelFilter
      filters={filters}
      handleAddFilter={getAddFilterHandler({ location, navigate })}
      handleDeleteFilter={getDeleteFilterHandler({ location, navigate })}
      handleClearFilters={getClearFiltersHandler({ location, navigate })}
    />
  );
}

function PipelineRunsPage() {
  const { namespace = '*' } = useParams();
  const location = useLocation();
  const filters = getFilters(location);
  useTitleSync({ page: 'PipelineRuns' });
  const { data, error, loading } = usePoll(
    tekton('pipelineruns', { namespace, labelSelector: filters.join(',') || undefined })
  );
  return (
    <>
      <h1>PipelineRuns</h1>
      <Filters filters={filters} />
      <LoadError error={error} />
      <PipelineRuns
        loading={loading && !data}
        pipelineRuns={byNewest(data?.items)}
        selectedNamespace={namespace}
      />
    </>
  );
}

function PipelineRunPage() {
  const { namespace, name } = useParams();
  const location = useLocation();
  const navigate = useNavigate();
  const query = new URLSearchParams(location.search);
  useTitleSync({ page: 'PipelineRun', resourceName: name });
  const pr = usePoll(tekton('pipelineruns', { namespace, name }));
  const trs = usePoll(tekton('taskruns', { namespace, labelSelector: `tekton.dev/pipelineRun=${name}` }));
  const pipelineRun = pr.data;
  // As the dashboard's PipelineRun page: TaskRuns, and a placeholder for
  // every pipeline task that has none (a custom task's CustomRun is not a
  // TaskRun, so it is such a placeholder: tektoncd/dashboard#1970).
  const taskRuns = pipelineRun
    ? getTaskRunsWithPlaceholders({ pipelineRun, taskRuns: trs.data?.items || [], tasks: [] })
    : [];

  function setQuery(changes) {
    const next = new URLSearchParams(location.search);
    Object.entries(changes).forEach(([key, value]) => {
      if (value === undefined || value === null || value === '') next.delete(key);
      else next.set(key, value);
    });
    navigate(`${location.pathname}?${next.toString()}`);
  }

  if (pr.error && !pipelineRun) {
    return <LoadError error={pr.error} />;
  }
  return (
    <PipelineRun
      duration={duration(pipelineRun)}
      enableLogAutoScroll
      error={trs.error?.message}
      fetchLogs={fetchLogs}
      handleTaskSelected={({ selectedRetry, selectedStepId, selectedTaskId, taskRunName }) =>
        setQuery({
          [PIPELINE_TASK]: selectedTaskId,
          [STEP]: selectedStepId,
          [RETRY]: Number.isInteger(selectedRetry) ? selectedRetry : undefined,
          [TASK_RUN_NAME]: taskRunName,
          [VIEW]: undefined
        })
      }
      loading={pr.loading && !pipelineRun}
      onRetryChange={retry => setQuery({ [RETRY]: Number.isInteger(retry) ? retry : undefined })}
      onViewChange={view => setQuery({ [VIEW]: view })}
      pipelineRun={pipelineRun}
      pollingInterval={2000}
      selectedRetry={query.get(RETRY) || ''}
      selectedStepId={query.get(STEP)}
      selectedTaskId={query.get(PIPELINE_TASK)}
      selectedTaskRunName={query.get(TASK_RUN_NAME)}
      taskRuns={taskRuns}
      tasks={[]}
      view={query.get(VIEW)}
    />
  );
}

function runStatus(run) {
  const { reason, status, message } = getStatus(run);
  return { reason: reason || 'Pending', status, message };
}

function runStatusIcon(run) {
  const { reason, status } = getStatus(run);
  return <StatusIcon isCustomTask reason={reason} status={status} />;
}

function CustomRunsPage() {
  const { namespace = '*' } = useParams();
  const location = useLocation();
  const filters = getFilters(location);
  useTitleSync({ page: 'CustomRuns' });
  const { data, error, loading } = usePoll(
    tektonBeta('customruns', { namespace, labelSelector: filters.join(',') || undefined })
  );
  const rows = byNewest(data?.items).map(run => {
    const { reason, message } = runStatus(run);
    return {
      id: run.metadata.uid,
      run: (
        <Link
          as={RouterLink}
          to={urls.customRuns.byName({ namespace: run.metadata.namespace, name: run.metadata.name })}
        >
          {run.metadata.name}
        </Link>
      ),
      status: (
        <span title={message ? `${reason} - ${message}` : reason}>
          {runStatusIcon(run)} {reason}
        </span>
      ),
      pipelineRun: run.metadata.labels?.['tekton.dev/pipelineRun'] || '-',
      created: <FormattedDate date={run.metadata.creationTimestamp} relative />
    };
  });
  return (
    <>
      <h1>CustomRuns</h1>
      <Filters filters={filters} />
      <LoadError error={error} />
      <Table
        loading={loading && !data}
        headers={[
          { key: 'run', header: 'Run' },
          { key: 'status', header: 'Status' },
          { key: 'pipelineRun', header: 'PipelineRun' },
          { key: 'created', header: 'Created' }
        ]}
        rows={rows}
        selectedNamespace={namespace}
        emptyTextAllNamespaces="No CustomRuns"
        emptyTextSelectedNamespace={`No CustomRuns in namespace ${namespace}`}
      />
    </>
  );
}

function CustomRunPage() {
  const { namespace, name } = useParams();
  const location = useLocation();
  const navigate = useNavigate();
  const view = new URLSearchParams(location.search).get(VIEW);
  useTitleSync({ page: 'CustomRun', resourceName: name });
  const { data: run, error, loading } = usePoll(tektonBeta('customruns', { namespace, name }));
  const ref = run?.spec?.customRef || run?.spec?.customSpec || {};
  const { reason, message } = run ? runStatus(run) : {};
  let runDuration = null;
  if (run) {
    const { status, lastTransitionTime } = getStatus(run);
    const end = status === 'True' || status === 'False' ? new Date(lastTransitionTime).getTime() : Date.now();
    runDuration = <FormattedDuration milliseconds={end - new Date(run.metadata.creationTimestamp).getTime()} />;
  }
  const pipelineRun = run?.metadata?.labels?.['tekton.dev/pipelineRun'];
  return (
    <ResourceDetails
      additionalMetadata={
        run ? (
          <>
            <li>
              <span>Duration:</span>
              {runDuration}
            </li>
            <li className="opr8r--customrun-status">
              <span>Status:</span>
              {runStatusIcon(run)}
              {message ? `${reason} - ${message}` : reason}
            </li>
            {pipelineRun && (
              <li>
                <span>PipelineRun:</span>
                <Link as={RouterLink} to={urls.pipelineRuns.byName({ namespace, name: pipelineRun })}>
                  {pipelineRun}
                </Link>
              </li>
            )}
          </>
        ) : null
      }
      error={error}
      loading={loading && !run}
      onViewChange={v => navigate(`${location.pathname}${v ? `?${VIEW}=${v}` : ''}`)}
      resource={run}
      view={view}
    >
      <h4>Custom Task</h4>
      <div className="tkn--resourcedetails-metadata">
        <p>
          <span>API version:</span>
          {ref.apiVersion}
        </p>
        <p>
          <span>Kind:</span>
          {ref.kind}
        </p>
      </div>
      {run?.spec?.params?.length ? (
        <Table
          title="Parameters"
          headers={[
            { key: 'name', header: 'Name' },
            { key: 'value', header: 'Value' }
          ]}
          rows={run.spec.params.map(({ name: paramName, value }) => ({
            id: paramName,
            name: paramName,
            value: <Param>{value}</Param>
          }))}
          size="sm"
        />
      ) : null}
    </ResourceDetails>
  );
}

function Shell() {
  const intl = useIntl();
  return (
    <>
      <Header aria-label="Tekton">
        <HeaderName as={RouterLink} to="/" prefix="Tekton">
          Dashboard components · opr8r e2e
        </HeaderName>
      </Header>
      <SideNav aria-label="Side navigation" expanded isPersistent isFixedNav>
        <SideNavItems>
          <SideNavLink as={RouterLink} to={paths.pipelineRuns.all()}>
            {intl.formatMessage({ id: 'dashboard.sideNav.pipelineRuns', defaultMessage: 'PipelineRuns' })}
          </SideNavLink>
          <SideNavLink as={RouterLink} to={paths.customRuns.all()}>
            {intl.formatMessage({ id: 'dashboard.sideNav.customRuns', defaultMessage: 'CustomRuns' })}
          </SideNavLink>
        </SideNavItems>
      </SideNav>
      <Content className="opr8r--content" id="main-content">
        <Notice />
        <Routes>
          <Route path="/" element={<Navigate to={paths.pipelineRuns.all()} replace />} />
          <Route path={paths.pipelineRuns.all()} element={<PipelineRunsPage />} />
          <Route path={paths.pipelineRuns.byNamespace()} element={<PipelineRunsPage />} />
          <Route path={paths.pipelineRuns.byName()} element={<PipelineRunPage />} />
          <Route path={paths.customRuns.all()} element={<CustomRunsPage />} />
          <Route path={paths.customRuns.byNamespace()} element={<CustomRunsPage />} />
          <Route path={paths.customRuns.byName()} element={<CustomRunPage />} />
          <Route path="*" element={<p>Not found: this page has PipelineRuns and CustomRuns only.</p>} />
        </Routes>
      </Content>
    </>
  );
}

createRoot(document.getElementById('root')).render(
  <StrictMode>
    <IntlProvider locale="en" defaultLocale="en" messages={{}} onError={() => {}}>
      <HashRouter>
        <Shell />
      </HashRouter>
    </IntlProvider>
  </StrictMode>
);
