-- A channel whose receiver answered 410 Gone is disabled (Standard Webhooks): its
-- deliveries fail without a request until an admin updates the channel (DESIGN.md,
-- Notifications: retry rules).
ALTER TABLE channels ADD COLUMN disabled_at timestamptz, ADD COLUMN disabled_reason text;
