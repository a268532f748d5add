package integration

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape reads a /metrics endpoint (TLS without verification: the test
// schedulers serve a self-signed certificate).
func scrape(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	return scrapeWith(t, &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test server on 127.0.0.1
	}}, url)
}

// scrapeWith is scrape with client (one that presents a certificate,
// for the extender).
func scrapeWith(t testing.TB, client *http.Client, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return families
}

// metricSum sums the values of a counter or gauge family over the series
// whose labels include want.
func metricSum(families map[string]*dto.MetricFamily, name string, want map[string]string) (float64, error) {
	f, ok := families[name]
	if !ok {
		return 0, fmt.Errorf("no metric %s", name)
	}
	var sum float64
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match {
			continue
		}
		switch {
		case m.GetCounter() != nil:
			sum += m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			sum += m.GetGauge().GetValue()
		}
	}
	return sum, nil
}
