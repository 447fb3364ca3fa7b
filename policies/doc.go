// Package policies decodes, validates and compiles promotion policy
// documents (apiVersion thaw.dev/v1, kind PromotionPolicy) into immutable
// values. Decoding is strict: unknown keys are errors carrying line and
// column.
//
// Status: implemented with issue 8.
package policies
