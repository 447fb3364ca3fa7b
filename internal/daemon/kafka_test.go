package daemon

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/thawdb/thaw/internal/testlog"
	"github.com/thawdb/thaw/internal/testtls"
	"github.com/thawdb/thaw/internal/tlsfail"
	"github.com/thawdb/thaw/tier/changelog"
	"github.com/thawdb/thaw/tier/tierclient"
	"github.com/thawdb/thaw/triggers/kafka"
)

// TestRunTabletsOnKafka runs `thaw coordinator` and three `thaw tablet`
// roles, each tablet server with its own data directory and its own Kafka
// client: the deployment the local changelog cannot serve above
// replication factor 1. A replication-factor-3 table takes writes; then
// each tablet server in turn is stopped: every row stays readable from the
// two left, whose replicas followed the leaders' logs in Kafka (kfake, a
// Kafka that speaks the real protocol), and their new leaders' writes
// continue the logs.
func TestRunTabletsOnKafka(t *testing.T) {
	kafka, err := kfake.NewCluster(kfake.NumBrokers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer kafka.Close()
	tr := startTabletRoles(t, func(tc *TabletConfig) {
		tc.Changelog.Kafka = &KafkaChangelogOptions{Brokers: kafka.ListenAddrs(), TopicPrefix: "it.thaw", PollInterval: 20 * time.Millisecond}
	})
	ids := []string{"ts-1", "ts-2", "ts-3"}
	for _, id := range ids {
		tr.start(id)
	}
	// They registered one changelog: the cluster's, under the prefix.
	want := "kafka:" + kafkaClusterID(t, kafka.ListenAddrs()) + "/it.thaw"
	for id, l := range tr.registeredChangelogs(len(ids)) {
		if l != want {
			t.Fatalf("%s registered changelog %q, want %q", id, l, want)
		}
	}

	c := tr.client()
	tr.createTables(c, 2, map[string]int{"t": 3})
	target := tierclient.Target{Database: "d", Table: "t"}
	rows := idRows(200, "v")
	retry(t, "write", func() error { return c.Upsert(tr.ctx, target, rows) })
	for _, id := range ids {
		tr.stop(id)
		retry(t, "read without "+id, func() error { return readBack(tr.ctx, c, target, rows) })
		// The new leaders append after what the old ones wrote.
		rows = idRows(200, "v-without-"+id)
		retry(t, "write without "+id, func() error { return c.Upsert(tr.ctx, target, rows) })
		tr.start(id)
	}
	retry(t, "read all", func() error { return readBack(tr.ctx, c, target, rows) })
}

// retry calls fn until it succeeds, for at most a minute.
func retry(t *testing.T, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKafkaChangelogSASL: the changelog's Kafka client authenticates with
// SASL/SCRAM, its password from THAW_KAFKA_PASSWORD. A missing or wrong
// password fails at start with an error that says where to look (and
// never shows the password).
func TestKafkaChangelogSASL(t *testing.T) {
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "tier", "tier-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	o := ChangelogOptions{MaxBatchBytes: DefaultMaxBatchBytes, Kafka: &KafkaChangelogOptions{
		Brokers: k.ListenAddrs(), SASL: &KafkaSASLConfig{Mechanism: "SCRAM-SHA-256", User: "tier"},
	}}
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	id := changelog.BucketLogID{TableID: 1}

	t.Setenv(EnvKafkaPassword, "")
	if _, err := openChangelog("", o, log); err == nil || !strings.Contains(err.Error(), EnvKafkaPassword) {
		t.Fatalf("no password: %v", err)
	}
	t.Setenv(EnvKafkaPassword, "wrong")
	if _, err := openChangelog("", o, log); err == nil || !strings.Contains(err.Error(), "check brokers, TLS and SASL") || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong password: %v", err)
	}
	if strings.Contains(logs.String(), "wrong") {
		t.Fatalf("the password is in the log:\n%s", logs.String())
	}

	t.Setenv(EnvKafkaPassword, "tier-secret")
	p, err := openChangelog("", o, log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := p.Open(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if first, err := l.Append(t.Context(), [][]byte{[]byte("r")}); err != nil || first != 0 {
		t.Fatalf("append: %d, %v", first, err)
	}
}

// TestKafkaChangelogTLS: over TLS the changelog opens when ca_file trusts
// the brokers' certificate and fails at start when nothing does.
func TestKafkaChangelogTLS(t *testing.T) {
	// httptest's certificate is valid for 127.0.0.1, where kfake listens.
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.StartTLS()
	defer srv.Close()
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(srv.TLS.Clone()))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	o := ChangelogOptions{MaxBatchBytes: DefaultMaxBatchBytes, Kafka: &KafkaChangelogOptions{Brokers: k.ListenAddrs(), TLS: &KafkaTLSConfig{}}}
	if _, err := openChangelog("", o, log); err == nil || !strings.Contains(err.Error(), "check brokers, TLS and SASL") {
		t.Fatalf("untrusted certificate: %v", err)
	}
	o.Kafka.TLS.CAFile = ca
	p, err := openChangelog("", o, log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := p.Open(t.Context(), changelog.BucketLogID{TableID: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if first, err := l.Append(t.Context(), [][]byte{[]byte("r")}); err != nil || first != 0 {
		t.Fatalf("append: %d, %v", first, err)
	}
}

// TestKafkaTLSReload: the Kafka clients' TLS files are followed without a
// restart. A broker certificate renewed by another CA is refused by the
// dialer the daemon built at start until ca_file holds that CA, then
// trusted by the same dialer (a franz-go client through it reaches the
// broker); a renewed client key pair is presented on the next connection.
func TestKafkaTLSReload(t *testing.T) {
	dir := t.TempDir()
	brokerCert, brokerKey := filepath.Join(dir, "broker.pem"), filepath.Join(dir, "broker-key.pem")
	clientCert, clientKey := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	first := testtls.Write(t, brokerCert, brokerKey) // for 127.0.0.1, its own CA
	ownFirst := testtls.Write(t, clientCert, clientKey)
	quiet := slog.New(slog.DiscardHandler)
	broker, err := newCertReloader(brokerCert, brokerKey, quiet)
	if err != nil {
		t.Fatal(err)
	}
	var presented atomic.Pointer[x509.Certificate]
	k, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return broker.get(), nil },
		ClientAuth:     tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			presented.Store(cs.PeerCertificates[0])
			return nil
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	trust := filepath.Join(dir, "trust.pem")
	replaceBundle(t, trust, pemOf(t, first))

	var logs testlog.Buffer
	dial, _, err := kafkaConnection("kafka", &KafkaTLSConfig{CAFile: trust, CertFile: clientCert, KeyFile: clientKey}, nil, os.Getenv, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	handshake := func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		c, err := dial(ctx, "tcp", k.ListenAddrs()[0])
		if err != nil {
			return err
		}
		return c.Close()
	}
	ping := func() error {
		cl, err := kgo.NewClient(kafka.ConnOptions(k.ListenAddrs(), "test", nil, dial, nil, quiet)...)
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		return cl.Ping(ctx)
	}
	if err := ping(); err != nil {
		t.Fatalf("the first certificates: %v", err)
	}
	if got := presented.Load(); got == nil || !got.Equal(ownFirst) {
		t.Fatal("the broker did not see the client certificate")
	}

	second := testtls.Write(t, brokerCert, brokerKey)
	within10s(t, "the renewed broker certificate is refused while ca_file holds only the first CA", func() error {
		if err := handshake(); !tlsfail.Untrusted(err) {
			return fmt.Errorf("%v, want an untrusted-certificate error", err)
		}
		return nil
	})
	replaceBundle(t, trust, append(pemOf(t, first), pemOf(t, second)...))
	within10s(t, "the same dialer trusts the renewed certificate once ca_file holds its CA", ping)

	ownSecond := testtls.Write(t, clientCert, clientKey)
	within10s(t, "the renewed client certificate is presented", func() error {
		if err := handshake(); err != nil {
			return err
		}
		if got := presented.Load(); got == nil || !got.Equal(ownSecond) {
			return errors.New("the broker saw the previous client certificate")
		}
		return nil
	})
	for _, want := range []string{"CA bundle reloaded", "certificate reloaded"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("%q not logged: %s", want, logs.String())
		}
	}
}

// kafkaClusterID asks the brokers for their cluster id.
func kafkaClusterID(t *testing.T, brokers []string) string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	resp, err := req.RequestWith(t.Context(), cl)
	if err != nil || resp.ClusterID == nil || *resp.ClusterID == "" {
		t.Fatalf("cluster id: %v %v", resp, err)
	}
	return *resp.ClusterID
}
