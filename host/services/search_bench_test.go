package services

import (
	"context"
	"os"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/adapters"
)

// searchCases are natural-language questions an agent might ask, written
// from the datadog-v2 document, and the tool each should find.
var searchCases = []struct{ query, want string }{
	{"attach a file to an incident postmortem", "CreateIncidentPostmortemAttachment"},
	{"what permissions does a user have", "ListUserPermissions"},
	{"list all roles in the organization", "ListRoles"},
	{"check the status of an SLO report job", "GetSLOReportJobStatus"},
	{"remove a link from a team", "DeleteTeamLink"},
	{"metric volumes by metric name", "ListVolumesByMetricName"},
	{"add dashboards to a dashboard list", "CreateDashboardListItems"},
	{"record a deployment event for DORA metrics", "CreateDORADeployment"},
	{"start a Bits AI investigation", "TriggerInvestigation"},
	{"change an on-call schedule", "UpdateOnCallSchedule"},
	{"find trace spans matching a query", "ListSpans"},
	{"show every API key", "ListAPIKeys"},
	{"remove an exclusion filter from the web application firewall", "DeleteApplicationSecurityWafExclusionFilter"},
	{"add an on-call notification channel for a user", "CreateUserNotificationChannel"},
	{"edit a dataset", "UpdateDataset"},
	{"which ServiceNow assignment groups exist", "ListServiceNowAssignmentGroups"},
	{"report a CI pipeline event", "CreateCIAppPipelineEvent"},
	{"fetch a Fastly account", "GetFastlyAccount"},
	{"remove an AuthN mapping", "DeleteAuthNMapping"},
	{"list metrics generated from spans", "ListSpansMetrics"},
	{"add a policy to an org group", "CreateOrgGroupPolicy"},
	{"list the AWS on-demand tasks", "ListAwsOnDemandTasks"},
	{"open an investigation notebook for a case", "CreateCaseNotebook"},
	{"submit metric points", "SubmitMetrics"},
	{"declare a new incident", "CreateIncident"},
	{"query timeseries data", "QueryTimeseriesData"},
	{"get all running processes", "ListProcesses"},
	{"search security signals", "SearchSecurityMonitoringSignals"},
}

// BenchmarkToolSearch imports the datadog-v2 document (985 tools) and
// reports how often the right tool ranks first and in the top 5, and the
// median query time.
func BenchmarkToolSearch(b *testing.B) {
	m := newManager(b)
	ctx := context.Background()
	doc, err := os.ReadFile("testdata/datadog-v2-3.0.yaml")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := m.Create(ctx, CreateInput{ID: "datadog", Adapter: "openapi", Source: adapters.Source{Content: string(doc)}}); err != nil {
		b.Fatal(err)
	}
	for _, c := range searchCases {
		if _, err := m.Tool(ctx, "datadog", c.want); err != nil {
			b.Fatalf("case %q: %v", c.query, err)
		}
	}
	var times []time.Duration
	var top1, top5 int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := searchCases[i%len(searchCases)]
		start := time.Now()
		items, _, err := m.Search(ctx, SearchInput{Query: c.query, Limit: 5})
		times = append(times, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
		if i >= len(searchCases) {
			continue
		}
		at := slices.IndexFunc(items, func(t ScoredTool) bool { return t.ID == c.want })
		if at == 0 {
			top1++
		}
		if at >= 0 {
			top5++
		} else {
			var got []string
			for _, t := range items {
				got = append(got, t.ID)
			}
			b.Logf("miss: %q → %v (want %s)", c.query, got, c.want)
		}
	}
	b.StopTimer()
	n := min(b.N, len(searchCases))
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(top1)/float64(n), "top1")
	b.ReportMetric(float64(top5)/float64(n), "top5")
	b.ReportMetric(float64(times[len(times)/2].Microseconds()), "p50-µs")
	b.ReportMetric(0, "ns/op")
}
