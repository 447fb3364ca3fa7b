// Package cron turns cron schedules (robfig/cron, with time zones) into
// promotion requests. Triggers only enqueue keys; they never promote.
//
// Status: implemented with issue 8.
package cron
