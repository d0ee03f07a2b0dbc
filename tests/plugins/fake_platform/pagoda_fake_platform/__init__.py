"""pagoda-fake-platform: registers the platform 'fake-platform' (usable only with FAKE_PLATFORM_AVAILABLE=1)."""
