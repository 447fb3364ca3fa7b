package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/thawdb/thaw/internal/metricvalue"
	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/lake"
	"github.com/thawdb/thaw/promoter"
)

// kafkaPolicy is testPolicy with the onLakeCommit trigger too.
var kafkaPolicy = strings.Replace(testPolicy, "triggers: {onRequest: true}", "triggers: {onRequest: true, onLakeCommit: true}", 1)

// TestPromoterKafkaControlEvents runs the promoter daemon with a Kafka
// control topic (kfake, a Kafka that speaks the real protocol, with
// SCRAM authentication): a promote event promotes a partition outside the
// policy's window, a lake_commit event promotes the day a new lake commit
// added — long before the next lake poll (an hour) — and a record that is
// no event and an event naming an unknown policy are skipped and counted.
// Every promotion's states go out as status events on another topic, in
// order. The SASL password (from THAW_KAFKA_PASSWORD) appears in no log
// line, no metric, no status event and nothing in etcd.
func TestPromoterKafkaControlEvents(t *testing.T) {
	const user, password, topic, statusTopic = "thaw", "SECRET-kafka-pw-5d1e9a", "thaw-control", "thaw-status"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, statusTopic), kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "admin", "admin-pw"), kfake.User("SCRAM-SHA-256", user, password))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic),
		kgo.SASL(scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	produce := func(values ...string) {
		t.Helper()
		for _, v := range values {
			if err := producer.ProduceSync(t.Context(), &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	if kafkaPolicy == testPolicy {
		t.Fatal("kafkaPolicy: testPolicy's triggers line changed")
	}
	cfg, info := promoterTestSetup(t, kafkaPolicy)
	cfg.LakePollInterval = time.Hour
	cfg.Kafka = &KafkaConfig{Brokers: c.ListenAddrs(), Topic: topic, StatusTopic: statusTopic,
		SASL: &KafkaSASLConfig{Mechanism: "SCRAM-SHA-256", User: user}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// Without the password the promoter does not start; thaw plan, which
	// does not consume, needs none.
	t.Setenv(EnvKafkaPassword, "")
	if _, err := StartPromoter(t.Context(), cfg, PromoterOptions{}); err == nil || !strings.Contains(err.Error(), "THAW_KAFKA_PASSWORD is not set") {
		t.Fatalf("start without the password: %v", err)
	}
	if plans, err := PlanPromoter(t.Context(), cfg, "", PromoterOptions{Embedded: smallEmbedded}); err != nil || len(plans) != 1 {
		t.Fatalf("plan without the password: %v %v", plans, err)
	}
	t.Setenv(EnvKafkaPassword, password)
	// A second policy whose lake table is gone from the lake.
	gone := filepath.Join(t.TempDir(), "gone.yaml")
	gonePolicy := strings.NewReplacer("name: recent", "name: gone", "lake.events", "lake.gone", "table: events", "table: gone").Replace(testPolicy)
	if err := os.WriteFile(gone, []byte(gonePolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Policies = append(cfg.Policies, gone)
	var logs testlog.Buffer
	reg := prometheus.NewRegistry()
	d, err := StartPromoter(t.Context(), cfg, PromoterOptions{
		RunOptions: RunOptions{Logger: NewLogger(&logs, LogConfig{Level: "debug", Format: "json"}), Registry: reg},
		Embedded:   smallEmbedded,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	defer func() {
		if !t.Failed() {
			return
		}
		var lines []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if !strings.Contains(l, `"msg":"pebble"`) && !strings.Contains(l, `"component":"tier"`) {
				lines = append(lines, l)
			}
		}
		t.Logf("promoter log (last 100 lines without the tier's and Pebble's):\n%s", strings.Join(lines[max(0, len(lines)-100):], "\n"))
	}()
	if err := d.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The first lake poll promotes the window (2024-01-02, 2024-01-03).
	waitCommitted(t, d.Promoter(), "2024-01-02", "2024-01-03")

	// An event naming a lake table the lake does not have is rejected,
	// not retried: the events after it are handled.
	produce(
		`{"version":1,"type":"promote","policy":"gone","partition":"2024-01-01"}`,
		`{"version":1,"type":"promote","table":"shop.events","partition":"2024-01-01"}`,
		`{"version":1,"type":"promote","table":"shop.events"`, // cut short
		`{"version":1,"type":"promote","policy":"nonesuch"}`,
	)
	waitCommitted(t, d.Promoter(), "2024-01-01")

	if _, err := lake.SampleAppendDay(t.Context(), info, lake.SampleAppend{Day: time.Date(2024, 1, 4, 0, 0, 0, 0, time.UTC), FirstID: 1000, Rows: 40, Seed: 9}); err != nil {
		t.Fatal(err)
	}
	produce(`{"version":1,"type":"lake_commit","catalog":"default","table":"lake.events"}`)
	waitCommitted(t, d.Promoter(), "2024-01-04")

	want := `
# HELP thaw_promoter_control_events_total Kafka control events by type (invalid: not an event) and outcome (handled, rejected).
# TYPE thaw_promoter_control_events_total counter
thaw_promoter_control_events_total{outcome="handled",type="lake_commit"} 1
thaw_promoter_control_events_total{outcome="handled",type="promote"} 1
thaw_promoter_control_events_total{outcome="rejected",type="invalid"} 1
thaw_promoter_control_events_total{outcome="rejected",type="promote"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "thaw_promoter_control_events_total"); err != nil {
		t.Error(err)
	}
	for _, line := range []string{`"msg":"control event skipped"`, `"msg":"control event rejected"`, `unknown policy`} {
		if !strings.Contains(logs.String(), line) {
			t.Errorf("log lacks %s", line)
		}
	}

	// Status events: each promotion's phases, in order.
	status := statusEvents(t, c.ListenAddrs(), statusTopic, []kgo.Opt{kgo.SASL(scram.Auth{User: "admin", Pass: "admin-pw"}.AsSha256Mechanism())},
		"2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04")
	// The brokers acknowledge a record before its count goes up.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, _, err := metricvalue.Value(reg, "thaw_promoter_status_events_total", map[string]string{"outcome": "published"})
		if err != nil {
			t.Fatal(err)
		}
		if got >= 20 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("published status events: %v, want at least 20", got)
		}
	}

	// No trace of the password: logs, metrics, status events, etcd.
	var metrics bytes.Buffer
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		metrics.WriteString(mf.String())
	}
	resp, err := d.Etcd().Get(t.Context(), "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var kvs bytes.Buffer
	for _, kv := range resp.Kvs {
		kvs.Write(kv.Key)
		kvs.Write(kv.Value)
	}
	if len(resp.Kvs) == 0 || !strings.Contains(kvs.String(), "2024-01-04") {
		t.Fatalf("control: the etcd scan holds %d keys and misses the promotion", len(resp.Kvs))
	}
	for where, data := range map[string][]byte{"logs": logs.Bytes(), "metrics": metrics.Bytes(), "etcd": kvs.Bytes(), "status events": status} {
		if bytes.Contains(data, []byte(password)) {
			t.Errorf("the Kafka password is in the %s", where)
		}
	}
}

// TestPromoterKafkaFailover: the leading promoter consumes an event and
// is closed; the standby that takes over consumes the next one and does
// not handle the first again (its offset was committed), through the
// same consumer group.
func TestPromoterKafkaFailover(t *testing.T) {
	const topic = "thaw-control"
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	producer, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	promote := func(partition string) {
		t.Helper()
		v := `{"version":1,"type":"promote","table":"shop.events","partition":"` + partition + `"}`
		if err := producer.ProduceSync(t.Context(), &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	cfg := promoterTestConfig(t)
	sharedTier(t, &cfg)
	cfg.Kafka = &KafkaConfig{Brokers: c.ListenAddrs(), Topic: topic}
	cfg.ID = "first"
	firstReg := prometheus.NewRegistry()
	first, err := StartPromoter(t.Context(), cfg, PromoterOptions{RunOptions: RunOptions{Registry: firstReg}})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = first.Close()
		}
	}()
	if err := first.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	standbyCfg := cfg
	standbyCfg.ID, standbyCfg.DataDir = "standby", ""
	standbyReg := prometheus.NewRegistry()
	standby, err := StartPromoter(t.Context(), standbyCfg, PromoterOptions{RunOptions: RunOptions{Registry: standbyReg}})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()

	promote("2024-01-01")
	waitCommitted(t, first.Promoter(), "2024-01-01")
	closed = true
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := standby.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	promote("2024-01-02")
	waitCommitted(t, standby.Promoter(), "2024-01-01", "2024-01-02")
	const handled = `
# HELP thaw_promoter_control_events_total Kafka control events by type (invalid: not an event) and outcome (handled, rejected).
# TYPE thaw_promoter_control_events_total counter
thaw_promoter_control_events_total{outcome="handled",type="promote"} 1
`
	for name, reg := range map[string]*prometheus.Registry{"first": firstReg, "standby": standbyReg} {
		if err := testutil.GatherAndCompare(reg, strings.NewReader(handled), "thaw_promoter_control_events_total"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// waitCommitted waits until p's ledger holds a committed promotion of
// every partition.
func waitCommitted(t *testing.T, p *promoter.Promoter, partitions ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for {
		recs, err := p.Promotions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		missing := 0
		for _, part := range partitions {
			found := false
			for _, r := range recs {
				found = found || (r.Partition == part && r.Phase == promoter.PhaseCommitted)
			}
			if !found {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("partitions %v not all committed: %+v", partitions, recs)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestPromoterKafkaConfig: the kafka section is checked with the rest of
// the config, and what it names (the password variable, TLS files) when
// the promoter starts.
func TestPromoterKafkaConfig(t *testing.T) {
	base := func() PromoterConfig {
		var cfg PromoterConfig
		cfg.Defaults()
		cfg.DataDir, cfg.Policies = t.TempDir(), []string{"p.yaml"}
		cfg.Catalogs = map[string]lake.Config{"default": {URI: "file:/x.db", Warehouse: "file:///w"}}
		return cfg
	}
	for _, tc := range []struct {
		k    KafkaConfig
		want string
	}{
		{KafkaConfig{Topic: "t"}, "kafka: invalid configuration: brokers: at least one HOST:PORT"},
		{KafkaConfig{Brokers: []string{"k:9092"}}, "kafka: topic (control events) or status_topic (status events): at least one is required"},
		{KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", StatusTopic: "t"}, `kafka: topic and status_topic are both "t"`},
		{KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", StatusTopic: "a/b"}, `kafka: status_topic: topic "a/b": only letters`},
		{KafkaConfig{StatusTopic: "s"}, "kafka: invalid configuration: brokers: at least one HOST:PORT"},
		{KafkaConfig{Brokers: []string{"k:9092"}, StatusTopic: "s", SASL: &KafkaSASLConfig{Mechanism: "PLAIN"}}, "sasl.user: required"},
		{KafkaConfig{Brokers: []string{"k"}, Topic: "t"}, `"k": want HOST:PORT`},
		{KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", Start: "now"}, `start "now"`},
		{KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", SASL: &KafkaSASLConfig{Mechanism: "OAUTHBEARER", User: "u"}}, `mechanism "OAUTHBEARER"`},
		{KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", SASL: &KafkaSASLConfig{Mechanism: "PLAIN"}}, "sasl.user: required"},
		{KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", TLS: &KafkaTLSConfig{CertFile: "c.pem"}}, "kafka.tls: cert_file and key_file go together"},
	} {
		cfg := base()
		cfg.Kafka = &tc.k
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.k, err, tc.want)
		}
	}
	ok := base()
	for _, k := range []KafkaConfig{
		{Brokers: []string{"k:9092"}, StatusTopic: "s"},
		{Brokers: []string{"k:9092"}, Topic: "t", StatusTopic: "s"},
		{Brokers: []string{"k:9092"}, Topic: "t"},
	} {
		ok.Kafka = &k
		if err := ok.Validate(); err != nil {
			t.Fatalf("%+v: %v", k, err)
		}
	}
	if got := ok.Kafka.trigger().Group; got != DefaultKafkaGroup {
		t.Errorf("default group %q", got)
	}

	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == EnvKafkaPassword {
				return v
			}
			return ""
		}
	}
	sasl := &KafkaSASLConfig{Mechanism: "PLAIN", User: "u"}
	for _, tc := range []struct {
		k    KafkaConfig
		pw   string
		want string
	}{
		{KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", SASL: sasl}, "", "kafka.sasl: THAW_KAFKA_PASSWORD is not set"},
		{KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", TLS: &KafkaTLSConfig{CAFile: filepath.Join(dir, "missing.pem")}}, "", "kafka.tls.ca_file: open"},
		{KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", TLS: &KafkaTLSConfig{CAFile: notPEM}}, "", "no PEM certificate"},
		{KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", TLS: &KafkaTLSConfig{CertFile: notPEM, KeyFile: notPEM}}, "", "kafka.tls: client certificate"},
	} {
		for _, status := range []bool{false, true} {
			k := tc.k
			if status { // the publisher's connection is read the same way
				k.Topic, k.StatusTopic = "", "s"
			}
			_, _, err := k.load(env(tc.pw), slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%+v: got %v, want %q", k, err, tc.want)
			}
		}
	}
	k, pub, err := KafkaConfig{Brokers: []string{"k:9092"}, Topic: "t", StatusTopic: "s", SASL: sasl, TLS: &KafkaTLSConfig{}}.load(env("pw"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if k == nil || k.SASL == nil || k.SASL.Password != "pw" || k.TLS != nil || k.Dial == nil || k.Validate() != nil || k.Topic != "t" {
		t.Fatalf("loaded %+v", k)
	}
	if pub == nil || pub.SASL == nil || pub.SASL.Password != "pw" || pub.TLS != nil || pub.Dial == nil || pub.Validate() != nil || pub.Topic != "s" || len(pub.Brokers) != 1 {
		t.Fatalf("loaded %+v", pub)
	}
	if k, pub, err := (KafkaConfig{Brokers: []string{"k:9092"}, StatusTopic: "s"}).load(env(""), slog.New(slog.DiscardHandler)); err != nil || k != nil || pub == nil {
		t.Fatalf("status topic only: trigger %+v, publisher %+v, %v", k, pub, err)
	}
	// From a config file: decoded strictly, paths resolved, validated.
	file := filepath.Join(dir, "promoter.yaml")
	doc := `data_dir: ` + dir + `
policies: [p.yaml]
catalogs: {default: {uri: /x.db, warehouse: "file:///w"}}
kafka:
  brokers: ["k1:9092", "k2:9092"]
  topic: thaw-control
  start: latest
  tls: {ca_file: ca.pem}
  sasl: {mechanism: SCRAM-SHA-512, user: thaw}
`
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadPromoterConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	if k := loaded.Kafka; k == nil || len(k.Brokers) != 2 || k.Start != "latest" || k.TLS.CAFile != notPEM || k.SASL.Mechanism != "SCRAM-SHA-512" {
		t.Fatalf("loaded %+v", loaded.Kafka)
	}
	bad := strings.Replace(doc, "  start: latest", "  password: hunter2", 1)
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPromoterConfig(file); err == nil || !strings.Contains(err.Error(), "line 7: unknown key \"password\"") {
		t.Errorf("a password in the file: %v", err)
	}

	// Relative TLS paths are the config file's.
	cfg := base()
	cfg.Kafka = &KafkaConfig{TLS: &KafkaTLSConfig{CAFile: "ca.pem", CertFile: "/abs/c.pem"}}
	cfg.ResolvePaths("/etc/thaw")
	if cfg.Kafka.TLS.CAFile != "/etc/thaw/ca.pem" || cfg.Kafka.TLS.CertFile != "/abs/c.pem" {
		t.Errorf("resolved %+v", cfg.Kafka.TLS)
	}
}

// statusEvents reads the status topic until each of the partitions has a
// committed promotion, checks that every promotion's events parse and
// run through its phases in order, and returns the records' values.
func statusEvents(t *testing.T, brokers []string, topic string, opts []kgo.Opt, partitions ...string) []byte {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var raw []byte
	byID := map[string][]promoter.StatusEvent{}
	committed := map[string]bool{}
	for len(committed) < len(partitions) {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("status events: committed %v of %v", committed, partitions)
		}
		for _, r := range fs.Records() {
			raw = append(raw, r.Value...)
			e, err := promoter.ParseStatusEvent(r.Value)
			if err != nil {
				t.Fatalf("status event: %v\n%s", err, r.Value)
			}
			if string(r.Key) != e.Promotion {
				t.Fatalf("status event of %s under key %q", e.Promotion, r.Key)
			}
			byID[e.Promotion] = append(byID[e.Promotion], e)
			if e.Phase == promoter.PhaseCommitted {
				committed[e.Partition] = true
			}
		}
	}
	for id, es := range byID {
		var phases []string
		for i, e := range es {
			phases = append(phases, string(e.Phase))
			if i > 0 && e.Revision <= es[i-1].Revision {
				t.Errorf("%s: revision %d after %d", id, e.Revision, es[i-1].Revision)
			}
		}
		if got := strings.Join(phases, " "); got != "planned begun building committing committed" {
			t.Errorf("%s (%s): phases %q", id, es[0].Partition, got)
		}
	}
	return raw
}
