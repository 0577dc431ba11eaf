"""An installed app with a ``workflows`` module, to test yieldstar's autodiscovery."""
