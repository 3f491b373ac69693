"""The webhook's validators, one package per kind it validates (Harvester's
pkg/webhook/resources/<kind>/validator.go); `common` holds what they share."""
