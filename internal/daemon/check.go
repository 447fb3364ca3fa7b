package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/thawdb/thaw/tier/meta"
)

// CheckFiles reads every file the thaw server config names — the
// listener's key pair and CA bundles, coordinator.callers_file, the
// embedded etcd's key pair and client CA bundle — as a start would, and
// reports what does not load (`thaw server --check`). It starts nothing.
func (c ServerConfig) CheckFiles() error {
	log := slog.New(slog.DiscardHandler)
	_, _, err := c.TLS.load(log)
	return errors.Join(err, checkCallersFile(c.Coordinator), c.Etcd.TLS.check("etcd.tls"), c.Changelog.checkKafkaTLS())
}

// checkKafkaTLS loads changelog.kafka.tls's files as a start would.
func (c ChangelogOptions) checkKafkaTLS() error {
	if c.Kafka == nil {
		return nil
	}
	return checkKafkaTLS("changelog.kafka", c.Kafka.TLS)
}

// checkKafkaTLS loads a Kafka connection's TLS files (the SASL password
// is the environment's, no file).
func checkKafkaTLS(section string, t *KafkaTLSConfig) error {
	_, _, err := kafkaConnection(section, t, nil, os.Getenv, slog.New(slog.DiscardHandler))
	return err
}

// CheckFiles is ServerConfig.CheckFiles for thaw coordinator: also the
// internal token file and etcd's TLS files.
func (c CoordinatorConfig) CheckFiles() error {
	log := slog.New(slog.DiscardHandler)
	_, _, _, err := loadSecrets(c.TLS, c.InternalTokenFile, log)
	return errors.Join(err, checkCallersFile(c.Coordinator), checkEtcdTLS(c.Etcd))
}

// CheckFiles is ServerConfig.CheckFiles for thaw tablet: the listener's
// TLS files, the internal token file and etcd's TLS files.
func (c TabletConfig) CheckFiles() error {
	log := slog.New(slog.DiscardHandler)
	_, _, _, err := loadSecrets(c.TLS, c.InternalTokenFile, log)
	return errors.Join(err, checkEtcdTLS(c.Etcd), c.Changelog.checkKafkaTLS())
}

func checkCallersFile(o CoordinatorOptions) error {
	if o.CallersFile == "" {
		return nil
	}
	_, err := parseCallersFile(o.CallersFile, o.AuthorizeData)
	return err
}

func checkEtcdTLS(c EtcdConfig) error {
	if !c.secure() {
		return nil
	}
	if _, err := clientTLS(c.TLS.CAFile, "etcd.tls.ca_file", c.TLS.CertFile, c.TLS.KeyFile, slog.New(slog.DiscardHandler)); err != nil {
		return fmt.Errorf("etcd.tls: %w", err)
	}
	return nil
}

// CheckFiles is ServerConfig.CheckFiles for thaw promoter: the policy
// files (LoadPolicies: parsed, and checked against the config and one
// another), the catalogs' local files (a SQLite catalog, a GCS key file:
// lake.Config.CheckFiles), the listener's TLS files, api_callers_file, the
// tier client's TLS files and the external tier's etcd TLS files. What
// needs the lake (the source tables, their schemas) is checked by thaw
// plan, which reads it.
func (c PromoterConfig) CheckFiles() error {
	log := slog.New(slog.DiscardHandler)
	_, perr := LoadPolicies(c)
	_, _, err := c.TLS.load(log)
	errs := []error{perr, err}
	for _, name := range sortedKeys(c.Catalogs) {
		if err := c.Catalogs[name].CheckFiles(); err != nil {
			errs = append(errs, fmt.Errorf("catalogs.%s: %w", name, err))
		}
	}
	if c.APICallersFile != "" {
		_, err := parseAPICallers(c.APICallersFile)
		errs = append(errs, err)
	}
	if t := c.Tier; t.CAFile != "" || t.CertFile != "" || t.KeyFile != "" {
		_, err := clientTLS(t.CAFile, "tier.ca_file", t.CertFile, t.KeyFile, log)
		errs = append(errs, err)
	}
	if !c.Tier.IsEmbedded() {
		errs = append(errs, checkEtcdTLS(c.Tier.Etcd))
	}
	if c.Kafka != nil {
		errs = append(errs, checkKafkaTLS("kafka", c.Kafka.TLS))
	}
	return errors.Join(errs...)
}

// check loads the files as a start would.
func (t EmbeddedEtcdTLS) check(section string) error {
	if t.CertFile == "" {
		return nil
	}
	if err := meta.CheckServingFiles(t.CertFile, t.KeyFile, t.ClientCAFile); err != nil {
		return fmt.Errorf("%s: %w", section, err)
	}
	return nil
}
