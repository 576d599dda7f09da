// Package openapi holds meshnet's OpenAPI v2 document, generated from
// api/proto by hack/gen-proto.sh, for meshnetd to serve.
package openapi

import _ "embed"

// Document is meshnet.swagger.json: the REST mapping of LinkService and
// DataService.
//
//go:embed meshnet.swagger.json
var Document []byte
